package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Cluster routes requests over a cluster's shards (spec §11). The handlers
// stay the single node's: a thread's request runs them over the store of
// the thread's shard when this node owns it, and is forwarded otherwise.
type Cluster interface {
	// Admit reads the node headers of a request (node-to-node calls carry
	// the cluster secret) and removes them: a request with node headers but
	// without the secret is refused, so no client can pose as a node.
	Admit(r *http.Request) (*http.Request, error)
	// Thread routes a request about thread tid. When this node serves the
	// thread's shard it returns the shard with the request to run the
	// handler on (its context carries the shard's epoch for writes);
	// otherwise it answers the request itself (forwarded to the owner) and
	// returns answered.
	Thread(w http.ResponseWriter, r *http.Request, tid string) (_ *http.Request, _ Shard, answered bool, _ error)
	// ListThreads merges every shard's page in ID order.
	ListThreads(r *http.Request, o store.ListOptions) ([]wire.Thread, string, error)
	// LegalHolds lists every shard's threads on hold, in ID order.
	LegalHolds(r *http.Request) ([]wire.Thread, error)
	// RetentionStatus and RetentionRun answer GET /admin/retention and POST
	// /admin/retention/run for every shard of the cluster.
	RetentionStatus(r *http.Request) (any, error)
	RetentionRun(r *http.Request, req retention.RunRequest, wait bool) (status int, body any, err error)
	// Erasures is the erasure service of request r (spec §11.1): a
	// node's call about one shard gets that shard's, any other the
	// cluster's. nil when sealing is off.
	Erasures(r *http.Request) (retention.Erasures, error)
	// ForwardShard answers a request about shard n, which this node does
	// not hold (a backup's ?shard=N), with the answer of the shard's owner.
	ForwardShard(w http.ResponseWriter, r *http.Request, n int) error
	// Status answers GET /admin/cluster.
	Status(r *http.Request) (any, error)
	// Move answers POST /admin/cluster/shards/{n}/move: it moves shard n
	// to node to when this node is to, and forwards the request (body as
	// read) to node to otherwise, which it says by answered.
	Move(w http.ResponseWriter, r *http.Request, n int, to string, body []byte) (answered bool, result any, err error)
	// Check answers for /healthz: every shard this node holds can commit.
	Check(ctx context.Context) error
	// Failed sees every error a request ended with (fencing refusals are
	// counted).
	Failed(err error)
}

// Shard is what a node serves a thread from: the shard's store, its
// retention service and its attachments store (nil: none).
type Shard struct {
	Store     *store.Store
	Retention retention.Service
	Blobs     *attachments.Blobs
}

type shardKey struct{}

// StatusError is an error that names its own HTTP status and code (a
// cluster's 421 and 503 answers).
type StatusError interface {
	error
	HTTPStatus() int
	ErrorCode() Code
}

var errNotInCluster = &httpError{http.StatusNotFound, CodeNotACluster, "not a cluster node: PROGRESSDB_CLUSTER_ETCD is unset"}

// routeThread runs before a thread's handler in cluster mode.
func (s *server) routeThread(w http.ResponseWriter, r *http.Request) (*http.Request, bool, error) {
	tid := r.PathValue("tid")
	if s.cluster == nil || tid == "" || store.ValidateID(tid) != nil {
		// A bad ID is refused by the handler before it reads a store.
		return r, false, nil
	}
	r, sh, answered, err := s.cluster.Thread(w, r, tid)
	if err != nil || answered {
		return r, true, err
	}
	return withShard(r, sh), false, nil
}

func withShard(r *http.Request, sh Shard) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), shardKey{}, sh))
}

// shard is what a handler serves: the thread's shard in a cluster, the
// one store and retention service otherwise.
func (s *server) shard(r *http.Request) Shard {
	if sh, ok := r.Context().Value(shardKey{}).(Shard); ok {
		return sh
	}
	return Shard{Store: s.store, Retention: s.retention, Blobs: s.attach}
}

// st is the store a handler reads and writes.
func (s *server) st(r *http.Request) *store.Store { return s.shard(r).Store }

// ret is the retention service a handler asks.
func (s *server) ret(r *http.Request) retention.Service { return s.shard(r).Retention }

// clusterStatus answers GET /admin/cluster.
func (s *server) clusterStatus(w http.ResponseWriter, r *http.Request) error {
	if s.cluster == nil {
		return errNotInCluster
	}
	st, err := s.cluster.Status(r)
	if err != nil {
		return err
	}
	return s.writeJSON(w, r, http.StatusOK, st)
}

// moveRequest is the body of POST /admin/cluster/shards/{n}/move.
type moveRequest struct {
	To string `json:"to"`
}

// moveShard answers POST /admin/cluster/shards/{n}/move (spec §11).
func (s *server) moveShard(w http.ResponseWriter, r *http.Request) error {
	if s.cluster == nil {
		return errNotInCluster
	}
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 0 {
		return badRequest(CodeInvalidParameter, "the shard must be a number: %s", r.PathValue("n"))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4<<10))
	if err != nil {
		return badRequest(CodeInvalidJSON, "reading the request body: %v", err)
	}
	var req moveRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.To == "" {
		return badRequest(CodeInvalidJSON, `the body must be {"to": "<node id>"}`)
	}
	answered, res, err := s.cluster.Move(w, r, n, req.To, body)
	if err != nil || answered {
		return err
	}
	return s.writeJSON(w, r, http.StatusOK, res)
}
