package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"net/http"
	"time"
)

// result returns v, or the answer as an *APIError when the operation's
// success status did not come (v is then nil).
func result[T any](v *T, res *http.Response, body []byte) (*T, error) {
	if v == nil {
		return nil, newAPIError(res, body)
	}
	return v, nil
}

// noContent checks a 204 answer.
func noContent(res *http.Response, body []byte) error {
	if res.StatusCode != http.StatusNoContent {
		return newAPIError(res, body)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// optional returns nil for the zero value, so that the parameter is left
// out of the request.
func optional[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// ListOptions shape a listing.
type ListOptions struct {
	// Limit is the page size, 1 to 1000; 0 is the server's default.
	Limit int
	// Cursor resumes after a page: the next cursor it returned. An
	// iterator starts from it and follows every later page itself.
	Cursor string
	// IncludeDeleted also lists soft-deleted items.
	IncludeDeleted bool
}

// pages iterates every item of a listing from opts.Cursor on, one page
// request at a time; an error is yielded once and ends the iteration.
func pages[T any](opts ListOptions, page func(ListOptions) ([]T, string, error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for {
			items, next, err := page(opts)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			if next == "" {
				return
			}
			opts.Cursor = next
		}
	}
}

// Health returns nil when the server's store is open and can commit.
func (c *Client) Health(ctx context.Context) error {
	r, err := c.raw.HealthzWithResponse(ctx)
	if err != nil {
		return err
	}
	_, err = result(r.JSON200, r.HTTPResponse, r.Body)
	return err
}

// CreateThread creates a thread; t.Id nil lets the server choose the ID.
func (c *Client) CreateThread(ctx context.Context, t NewThread) (*Thread, error) {
	r, err := c.raw.CreateThreadWithResponse(ctx, nil, t, c.APIAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON201, r.HTTPResponse, r.Body)
}

// GetThread returns a live thread, or a soft-deleted one too with
// includeDeleted.
func (c *Client) GetThread(ctx context.Context, tid string, includeDeleted bool) (*Thread, error) {
	r, err := c.raw.GetThreadWithResponse(ctx, tid, &GetThreadParams{IncludeDeleted: optional(includeDeleted)}, c.APIAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// EditThread changes a live thread's title.
func (c *Client) EditThread(ctx context.Context, tid, title string) (*Thread, error) {
	r, err := c.raw.EditThreadWithResponse(ctx, tid, nil, ThreadEdit{Title: title}, c.APIAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// DeleteThread soft-deletes a thread.
func (c *Client) DeleteThread(ctx context.Context, tid string) error {
	r, err := c.raw.DeleteThreadWithResponse(ctx, tid, c.APIAuth())
	if err != nil {
		return err
	}
	return noContent(r.HTTPResponse, r.Body)
}

// RestoreThread restores a soft-deleted thread.
func (c *Client) RestoreThread(ctx context.Context, tid string) (*Thread, error) {
	r, err := c.raw.RestoreThreadWithResponse(ctx, tid, nil, c.APIAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// ThreadsPage returns one page of threads and the cursor of the next
// ("" after the last page).
func (c *Client) ThreadsPage(ctx context.Context, opts ListOptions) ([]Thread, string, error) {
	r, err := c.raw.ListThreadsWithResponse(ctx, &ListThreadsParams{
		Limit: optional(opts.Limit), Cursor: optional(opts.Cursor), IncludeDeleted: optional(opts.IncludeDeleted),
	}, c.APIAuth())
	if err != nil {
		return nil, "", err
	}
	p, err := result(r.JSON200, r.HTTPResponse, r.Body)
	if err != nil {
		return nil, "", err
	}
	return p.Threads, p.NextCursor, nil
}

// Threads iterates every thread, page after page.
func (c *Client) Threads(ctx context.Context, opts ListOptions) iter.Seq2[Thread, error] {
	return pages(opts, func(o ListOptions) ([]Thread, string, error) { return c.ThreadsPage(ctx, o) })
}

// AppendMessage appends a message to a live thread; m.Id nil lets the
// server choose the ID. A chosen ID makes a retried append safe: the
// second one answers id_unavailable.
func (c *Client) AppendMessage(ctx context.Context, tid string, m NewMessage) (*Message, error) {
	r, err := c.raw.AppendMessageWithResponse(ctx, tid, nil, m, c.APIAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON201, r.HTTPResponse, r.Body)
}

// GetMessage returns a message's latest version.
func (c *Client) GetMessage(ctx context.Context, tid, mid string, includeDeleted bool) (*Message, error) {
	r, err := c.raw.GetMessageWithResponse(ctx, tid, mid, &GetMessageParams{IncludeDeleted: optional(includeDeleted)}, c.APIAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// EditMessage stores a new version of a message with body.
func (c *Client) EditMessage(ctx context.Context, tid, mid string, body any) (*Message, error) {
	r, err := c.raw.EditMessageWithResponse(ctx, tid, mid, MessageEdit{Body: body}, c.APIAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// DeleteMessage soft-deletes a message (a tombstone version).
func (c *Client) DeleteMessage(ctx context.Context, tid, mid string) error {
	r, err := c.raw.DeleteMessageWithResponse(ctx, tid, mid, c.APIAuth())
	if err != nil {
		return err
	}
	return noContent(r.HTTPResponse, r.Body)
}

// RestoreMessage restores a soft-deleted message (a live version).
func (c *Client) RestoreMessage(ctx context.Context, tid, mid string) (*Message, error) {
	r, err := c.raw.RestoreMessageWithResponse(ctx, tid, mid, nil, c.APIAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// MessagesPage returns one page of a thread's messages (latest versions,
// in order) and the next cursor.
func (c *Client) MessagesPage(ctx context.Context, tid string, opts ListOptions) ([]Message, string, error) {
	r, err := c.raw.ListMessagesWithResponse(ctx, tid, &ListMessagesParams{
		Limit: optional(opts.Limit), Cursor: optional(opts.Cursor), IncludeDeleted: optional(opts.IncludeDeleted),
	}, c.APIAuth())
	if err != nil {
		return nil, "", err
	}
	p, err := result(r.JSON200, r.HTTPResponse, r.Body)
	if err != nil {
		return nil, "", err
	}
	return p.Messages, p.NextCursor, nil
}

// Messages iterates every message of a thread, page after page.
func (c *Client) Messages(ctx context.Context, tid string, opts ListOptions) iter.Seq2[Message, error] {
	return pages(opts, func(o ListOptions) ([]Message, string, error) { return c.MessagesPage(ctx, tid, o) })
}

// VersionsPage returns one page of a message's versions, oldest first.
func (c *Client) VersionsPage(ctx context.Context, tid, mid string, opts ListOptions) ([]Message, string, error) {
	r, err := c.raw.ListVersionsWithResponse(ctx, tid, mid, &ListVersionsParams{
		Limit: optional(opts.Limit), Cursor: optional(opts.Cursor), IncludeDeleted: optional(opts.IncludeDeleted),
	}, c.APIAuth())
	if err != nil {
		return nil, "", err
	}
	p, err := result(r.JSON200, r.HTTPResponse, r.Body)
	if err != nil {
		return nil, "", err
	}
	return p.Versions, p.NextCursor, nil
}

// Versions iterates every version of a message, oldest first.
func (c *Client) Versions(ctx context.Context, tid, mid string, opts ListOptions) iter.Seq2[Message, error] {
	return pages(opts, func(o ListOptions) ([]Message, string, error) { return c.VersionsPage(ctx, tid, mid, o) })
}

// Database is the database a single node serves.
type Database struct {
	// ID is the database's identity.
	ID string
	// Path is its folder, as the server sees it.
	Path string
}

// Database returns the database the server serves (404 cluster_node on a
// cluster node).
func (c *Client) Database(ctx context.Context) (*Database, error) {
	r, err := c.raw.GetDatabaseWithResponse(ctx, nil, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	d, err := result(r.JSON200, r.HTTPResponse, r.Body)
	if err != nil {
		return nil, err
	}
	return &Database{ID: d.DatabaseId, Path: d.Path}, nil
}

// ThreadCounts are a database's threads by whether their record is
// sealed (spec §12); plain ones were written before sealing was on.
type ThreadCounts struct {
	Sealed, Plain int64
}

// CountThreads counts the threads of the database the server serves,
// sealed and plain (GET /admin/database?threads=true: a read of one
// record per thread).
func (c *Client) CountThreads(ctx context.Context) (*ThreadCounts, error) {
	yes := true
	r, err := c.raw.GetDatabaseWithResponse(ctx, &GetDatabaseParams{Threads: &yes}, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	d, err := result(r.JSON200, r.HTTPResponse, r.Body)
	if err != nil {
		return nil, err
	}
	if d.Threads == nil {
		return nil, errors.New("the server did not count its threads (it predates GET /admin/database?threads=true)")
	}
	return &ThreadCounts{Sealed: int64(d.Threads.Sealed), Plain: int64(d.Threads.Plain)}, nil
}

// isCluster reports whether an admin answer is a ClusterRetention (every
// shard's), which has shards at its top.
func isCluster(body []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return false
	}
	_, ok := top["shards"]
	return ok
}

// nodeOrCluster decodes an admin answer as this node's (node) or, when it
// is a ClusterRetention, every shard's (cluster); exactly one is set.
func nodeOrCluster[T any](body []byte, node func() (T, error), cluster func() (ClusterRetention, error)) (*T, *ClusterRetention, error) {
	if isCluster(body) {
		v, err := cluster()
		return nil, &v, err
	}
	v, err := node()
	return &v, nil, err
}

// RetentionStatus returns the retention configuration, schedule, lease
// and last run: of this node (status), or of every shard on a cluster
// node (cluster). Exactly one of the two is set.
func (c *Client) RetentionStatus(ctx context.Context) (status *RetentionStatus, cluster *ClusterRetention, err error) {
	r, err := c.raw.RetentionStatusWithResponse(ctx, c.AdminAuth())
	if err != nil {
		return nil, nil, err
	}
	if r.JSON200 == nil {
		return nil, nil, newAPIError(r.HTTPResponse, r.Body)
	}
	return nodeOrCluster(r.Body, r.JSON200.AsRetentionStatus, r.JSON200.AsClusterRetention)
}

// RunRetention runs retention now and waits for its summary (a node's
// run, or every shard's on a cluster node). A held lease is lease_held,
// a pause retention_paused, a failed run run_failed with Detail.Result.
func (c *Client) RunRetention(ctx context.Context, dryRun bool) (run *RunResult, cluster *ClusterRetention, err error) {
	r, err := c.raw.RetentionRunWithResponse(ctx, nil, RunRequest{DryRun: ptr(dryRun)}, c.AdminAuth())
	if err != nil {
		return nil, nil, err
	}
	if r.JSON200 == nil {
		return nil, nil, newAPIError(r.HTTPResponse, r.Body)
	}
	return nodeOrCluster(r.Body, r.JSON200.AsRunResult, r.JSON200.AsClusterRetention)
}

// StartRetention starts a run in the background and returns its run ID
// (or every shard's, on a cluster node) once the lease is held.
func (c *Client) StartRetention(ctx context.Context, dryRun bool) (runID string, cluster *ClusterRetention, err error) {
	r, err := c.raw.RetentionRunWithResponse(ctx, &RetentionRunParams{Wait: ptr(false)}, RunRequest{DryRun: ptr(dryRun)}, c.AdminAuth())
	if err != nil {
		return "", nil, err
	}
	if r.JSON202 == nil {
		return "", nil, newAPIError(r.HTTPResponse, r.Body)
	}
	if isCluster(r.Body) {
		v, err := r.JSON202.AsClusterRetention()
		return "", &v, err
	}
	v, err := r.JSON202.AsRetentionRun202JSONResponseBody0()
	return v.RunId, nil, err
}

// PauseRetention pauses retention (stored; survives restarts), giving
// reason.
func (c *Client) PauseRetention(ctx context.Context, reason string) (*PauseState, error) {
	r, err := c.raw.SetRetentionPauseWithResponse(ctx, PauseRequest{Paused: true, Reason: optional(reason)}, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// ResumeRetention ends a pause.
func (c *Client) ResumeRetention(ctx context.Context) (*PauseState, error) {
	r, err := c.raw.SetRetentionPauseWithResponse(ctx, PauseRequest{Paused: false}, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// LegalHolds returns every thread on legal hold, deleted or not.
func (c *Client) LegalHolds(ctx context.Context) ([]Thread, error) {
	r, err := c.raw.ListLegalHoldsWithResponse(ctx, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	p, err := result(r.JSON200, r.HTTPResponse, r.Body)
	if err != nil {
		return nil, err
	}
	return p.Threads, nil
}

// AdminThread returns a thread whether soft-deleted or not.
func (c *Client) AdminThread(ctx context.Context, tid string) (*Thread, error) {
	r, err := c.raw.GetAdminThreadWithResponse(ctx, tid, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// SetLegalHold puts a thread under legal hold (hold) or releases it.
func (c *Client) SetLegalHold(ctx context.Context, tid string, hold bool) (*Thread, error) {
	r, err := c.raw.SetLegalHoldWithResponse(ctx, tid, LegalHoldRequest{LegalHold: hold}, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// ThreadPolicy returns a thread's retention override and effective policy.
func (c *Client) ThreadPolicy(ctx context.Context, tid string) (*ThreadPolicy, error) {
	r, err := c.raw.GetThreadPolicyWithResponse(ctx, tid, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// SetThreadPolicy replaces a thread's retention override.
func (c *Client) SetThreadPolicy(ctx context.Context, tid string, o PolicyOverride) (*ThreadPolicy, error) {
	r, err := c.raw.SetThreadPolicyWithResponse(ctx, tid, o, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// ClearThreadPolicy removes a thread's retention override.
func (c *Client) ClearThreadPolicy(ctx context.Context, tid string) error {
	r, err := c.raw.ClearThreadPolicyWithResponse(ctx, tid, c.AdminAuth())
	if err != nil {
		return err
	}
	return noContent(r.HTTPResponse, r.Body)
}

// BackupOptions shape a backup.
type BackupOptions struct {
	// Shard is the shard to back up on a cluster node (required there);
	// nil on a single node.
	Shard *int
	// Compress is "zstd" or "none" (the server's default when empty), for
	// StreamBackup.
	Compress string
}

// CreateBackup writes a backup into the server's PROGRESSDB_BACKUP_PATH
// and returns its manifest (no_backup_path when unset).
func (c *Client) CreateBackup(ctx context.Context, opts BackupOptions) (*BackupManifest, error) {
	r, err := c.raw.CreateBackupWithResponse(ctx, &CreateBackupParams{Shard: opts.Shard}, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON201, r.HTTPResponse, r.Body)
}

// ListBackups returns the backups in the server's PROGRESSDB_BACKUP_PATH.
func (c *Client) ListBackups(ctx context.Context) (*BackupList, error) {
	r, err := c.raw.ListBackupsWithResponse(ctx, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// StreamBackup returns the backup archive as it arrives (tar, or zstd);
// the caller closes it. A stream that breaks before its end is no backup:
// read it to io.EOF without error before keeping it.
func (c *Client) StreamBackup(ctx context.Context, opts BackupOptions) (io.ReadCloser, error) {
	params := &StreamBackupParams{Shard: opts.Shard}
	if opts.Compress != "" {
		params.Compress = ptr(StreamBackupParamsCompress(opts.Compress))
	}
	res, err := c.raw.StreamBackup(ctx, params, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		defer res.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		return nil, newAPIError(res, body)
	}
	return res.Body, nil
}

// ClusterStatus returns the cluster as etcd sees it (not_a_cluster on a
// single node).
func (c *Client) ClusterStatus(ctx context.Context) (*ClusterStatus, error) {
	r, err := c.raw.ClusterStatusWithResponse(ctx, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// MoveShard moves shard n to the node named to, and answers once it is
// over.
func (c *Client) MoveShard(ctx context.Context, n int, to string) (*MoveResult, error) {
	r, err := c.raw.MoveShardWithResponse(ctx, n, MoveRequest{To: to}, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// RequestErasure erases everything author wrote (subject erasure, spec
// §12): it starts a retention run at once and returns the erasure's ID
// and run. Without sealing the server answers sealing_disabled.
func (c *Client) RequestErasure(ctx context.Context, author string) (*ErasureAccepted, error) {
	r, err := c.raw.RequestErasureWithResponse(ctx, nil, ErasureRequest{Author: author}, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON202, r.HTTPResponse, r.Body)
}

// Erasure returns an erasure's status.
func (c *Client) Erasure(ctx context.Context, id string) (*ErasureStatus, error) {
	r, err := c.raw.GetErasureWithResponse(ctx, id, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// WaitErasure asks for an erasure's status every interval until it is
// completed or failed (which the next run tries again), or ctx ends.
func (c *Client) WaitErasure(ctx context.Context, id string, every time.Duration) (*ErasureStatus, error) {
	for {
		st, err := c.Erasure(ctx, id)
		if err != nil {
			return nil, err
		}
		if st.Status == ErasureStatusStatusCompleted || st.Status == ErasureStatusStatusFailed {
			return st, nil
		}
		if err := sleep(ctx, every); err != nil {
			return st, err
		}
	}
}

// ErasureReceipt returns a completed erasure's receipt, to verify offline
// (erasure_incomplete until it has completed; receipt_unsigned when the
// server's audit footers are not signed).
func (c *Client) ErasureReceipt(ctx context.Context, id string) (*ErasureReceipt, error) {
	r, err := c.raw.GetErasureReceiptWithResponse(ctx, id, c.AdminAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}
