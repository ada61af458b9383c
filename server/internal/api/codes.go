package api

// Code is the machine-readable half of every error answer (spec §7):
// `{"error": "<message>", "code": "<code>"}`. Clients branch on the code,
// never on the message. The list is closed: it is the enum of the Error
// schema in api/openapi.yaml (TestErrorCodesAreTheDescriptions holds the
// two in step), and a code, once listed, keeps its meaning.
type Code string

// 400: the request is refused as it stands.
const (
	// CodeInvalidID: a thread or message ID (in the path or the body)
	// breaks the ID rule, or the path has an empty, "." or ".." segment.
	CodeInvalidID Code = "invalid_id"
	// CodeInvalidCursor: the cursor was not handed out by this listing;
	// start again from the first page.
	CodeInvalidCursor Code = "invalid_cursor"
	// CodeInvalidJSON: the body is not one JSON value of the described
	// shape (syntax, not UTF-8, an unknown field, a field of the wrong
	// type, a missing body).
	CodeInvalidJSON Code = "invalid_json"
	// CodeInvalidField: a body field breaks its rule (required, too long,
	// a message body that is not I-JSON, a retention value out of bounds).
	CodeInvalidField Code = "invalid_field"
	// CodeInvalidParameter: a query or path parameter other than an ID
	// breaks its rule (limit, include_deleted, wait, compress, shard), or
	// a node-to-node header does.
	CodeInvalidParameter Code = "invalid_parameter"
	// CodeInvalidIdempotencyKey: the Idempotency-Key header is empty, too
	// long (over 255 bytes) or not printable ASCII.
	CodeInvalidIdempotencyKey Code = "invalid_idempotency_key"
)

// 401, 403: credentials.
const (
	// CodeUnauthorized: the bearer token is missing or wrong (401).
	CodeUnauthorized Code = "unauthorized"
	// CodeAdminDisabled: PROGRESSDB_ADMIN_TOKEN is unset, so /admin is
	// off (403).
	CodeAdminDisabled Code = "admin_disabled"
	// CodeNotANode: cluster node headers without the cluster secret (403).
	CodeNotANode Code = "not_a_node"
)

// 404, 405: what is asked for is not there.
const (
	// CodeNotFound: the thread or message is unknown, soft-deleted (without
	// include_deleted) or purged.
	CodeNotFound Code = "not_found"
	// CodeRouteNotFound: no route has this path.
	CodeRouteNotFound Code = "route_not_found"
	// CodeNotACluster: a cluster route on a single node.
	CodeNotACluster Code = "not_a_cluster"
	// CodeClusterNode: a single node's route about its one database
	// (GET /admin/database) on a cluster node, which serves one per shard.
	CodeClusterNode Code = "cluster_node"
	// CodeMethodNotAllowed: the path does not take this method (405; Allow
	// lists those it takes).
	CodeMethodNotAllowed Code = "method_not_allowed"
)

// 409: the request conflicts with the state of the data.
const (
	// CodeAlreadyExists: a thread with this ID exists (or existed and is
	// being purged).
	CodeAlreadyExists Code = "already_exists"
	// CodeIDUnavailable: the client-chosen message ID is taken somewhere:
	// message IDs are unique across all threads.
	CodeIDUnavailable Code = "id_unavailable"
	// CodePurgeInProgress: the item's purge has begun; it can no longer be
	// restored or changed.
	CodePurgeInProgress Code = "purge_in_progress"
	// CodeLegalHold: the thread is under legal hold, which keeps it as it
	// is.
	CodeLegalHold Code = "legal_hold"
	// CodeLeaseHeld: another process holds the retention lease (holder
	// names it).
	CodeLeaseHeld Code = "lease_held"
	// CodeRetentionPaused: retention is paused (paused: true).
	CodeRetentionPaused Code = "retention_paused"
	// CodeRetentionDisabled: retention is switched off for this run.
	CodeRetentionDisabled Code = "retention_disabled"
	// CodeNoBackupPath: PROGRESSDB_BACKUP_PATH is unset.
	CodeNoBackupPath Code = "no_backup_path"
	// CodeShardNotHeld: a cluster node asked to back up a shard it does
	// not hold.
	CodeShardNotHeld Code = "shard_not_held"
	// CodeMoveInProgress: another move of the shard is under way, or the
	// target holds a copy of the shard already.
	CodeMoveInProgress Code = "move_in_progress"
	// CodeSealingDisabled: sealing is off (PROGRESSDB_KEK unset) and the
	// route needs it: subject erasure destroys keys (spec §12).
	CodeSealingDisabled Code = "sealing_disabled"
	// CodeErasureIncomplete: the erasure has not completed; its receipt
	// is written once it has.
	CodeErasureIncomplete Code = "erasure_incomplete"
	// CodeReceiptUnsigned: the erasure's audit footers are not signed (no
	// PROGRESSDB_AUDIT_SIGNING_KEY), so no receipt of it could be verified.
	CodeReceiptUnsigned Code = "receipt_unsigned"
	// CodeIdempotencyKeyInFlight: a request with this Idempotency-Key is
	// still being served (Retry-After); send it again then.
	CodeIdempotencyKeyInFlight Code = "idempotency_key_in_flight"
)

// 413, 421.
const (
	// CodeBodyTooLarge: the request body is over the limit the message
	// names.
	CodeBodyTooLarge Code = "body_too_large"
	// CodeMisdirected: a node's call reached a node that does not own the
	// shard with that epoch (421).
	CodeMisdirected Code = "misdirected"
	// CodeRangeNotSatisfiable: a download's Range lies outside the file
	// (416; Content-Range names its size).
	CodeRangeNotSatisfiable Code = "range_not_satisfiable"
)

// 422.
const (
	// CodeIdempotencyKeyReused: the Idempotency-Key was sent before with
	// another request (method, path or body); nothing was done.
	CodeIdempotencyKeyReused Code = "idempotency_key_reused"
)

// 500, 503: the server could not answer; a 503 may be retried.
const (
	// CodeInternal: the server failed; details are in its log.
	CodeInternal Code = "internal_error"
	// CodeRunFailed: a retention run started and failed (result describes
	// it).
	CodeRunFailed Code = "run_failed"
	// CodeShardUnavailable: the thread's shard has no owner, its owner
	// does not answer, or it is being moved (Retry-After); or this node
	// was deposed as its owner.
	CodeShardUnavailable Code = "shard_unavailable"
	// CodeClusterUnavailable: etcd did not answer, or the node a move
	// needs is not running.
	CodeClusterUnavailable Code = "cluster_unavailable"
	// CodeMoveFailed: a shard move failed before the hand-over and was
	// undone; the shard stays where it was.
	CodeMoveFailed Code = "move_failed"
	// CodeNotConfigured: the server runs without what the route needs
	// (retention, backups, a cluster-wide pause switch).
	CodeNotConfigured Code = "not_configured"
	// CodeUnavailable: the server is shutting down, the request was
	// canceled, or (GET /healthz) the store cannot commit.
	CodeUnavailable Code = "unavailable"
)

// Codes lists every code, in the order the description lists them.
func Codes() []Code {
	return []Code{
		CodeInvalidID, CodeInvalidCursor, CodeInvalidJSON, CodeInvalidField, CodeInvalidParameter, CodeInvalidIdempotencyKey,
		CodeUnauthorized, CodeAdminDisabled, CodeNotANode,
		CodeNotFound, CodeRouteNotFound, CodeNotACluster, CodeClusterNode, CodeMethodNotAllowed,
		CodeAlreadyExists, CodeIDUnavailable, CodePurgeInProgress, CodeLegalHold, CodeLeaseHeld,
		CodeRetentionPaused, CodeRetentionDisabled, CodeNoBackupPath, CodeShardNotHeld, CodeMoveInProgress,
		CodeSealingDisabled, CodeErasureIncomplete, CodeReceiptUnsigned, CodeIdempotencyKeyInFlight,
		CodeBodyTooLarge, CodeMisdirected, CodeRangeNotSatisfiable, CodeIdempotencyKeyReused,
		CodeInternal, CodeRunFailed, CodeShardUnavailable, CodeClusterUnavailable, CodeMoveFailed,
		CodeNotConfigured, CodeUnavailable,
	}
}
