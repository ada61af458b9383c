package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Routing to the leaders of replicated shards (spec §15,
// docs/replication-design.md §5, §9). A shard whose map names replicas
// is served by the node whose replica leads its Raft group: the leader
// serves it from its store, any other node forwards to the node of the
// shard's leader record, and a node called about a shard it does not
// lead refuses (421, and the caller asks etcd again once). No leader
// known, or one that lost its leadership, is a 503 with Retry-After:
// the client's retry finds the next one.

// Replicas is a node's part in its replicated shards: which of its
// replicas lead, and the read barrier of a leader.
type Replicas interface {
	// Lease is the term in which this node's replica of shard n leads
	// and may serve it; 0 when it does not, or the node has none.
	Lease(n int) uint64
	// ReadIndex returns once this node's replica of shard n may serve a
	// linearizable read: an error wrapping store.ErrNotLeader when it
	// does not lead.
	ReadIndex(ctx context.Context, n int) error
}

// grouped reports whether shard n is a Raft group, as the view sees the
// map: a shard of one copy is served by its owner until its home makes
// it a group.
func (rt *Router) grouped(n int) bool { return rt.o.View.state().m.Grouped(n) }

// leads reports whether this node's replica of shard n leads it.
func (rt *Router) leads(n int) bool {
	return rt.o.Replicas != nil && rt.o.Replicas.Lease(n) != 0
}

// here returns shard n's store when this node serves the shard itself:
// it holds it and, replicated, its replica leads.
func (rt *Router) here(n int) (*store.Store, bool) {
	st, held := rt.o.Shards.Store(n)
	if !held || !rt.grouped(n) {
		return st, held
	}
	return st, rt.leads(n)
}

// noLeader is a 503 with Retry-After (store.ErrNotLeader) for replicated
// shard n.
func noLeader(n int, format string, args ...any) error {
	return &routeError{http.StatusServiceUnavailable, api.CodeShardUnavailable,
		fmt.Sprintf("shard %d unavailable: ", n) + fmt.Sprintf(format, args...),
		fmt.Errorf("%w: %w", ErrShardUnavailable, store.ErrNotLeader)}
}

// notLeading refuses a node's call about replicated shard n that this
// node's replica does not lead: 421, which the caller retries once with
// etcd's leader record, and which carries Retry-After when relayed.
func (rt *Router) notLeading(n int) error {
	return &routeError{http.StatusMisdirectedRequest, api.CodeMisdirected,
		fmt.Sprintf("shard %d: node %s does not lead it now", n, rt.o.Node),
		fmt.Errorf("%w: %w", ErrMisdirected, store.ErrNotLeader)}
}

// checkLeader refuses a node's call about replicated shard n unless this
// node's replica leads it; a read waits for the read barrier, so that
// it sees every write acknowledged before it began.
func (rt *Router) checkLeader(ctx context.Context, n int, read bool) error {
	if _, held := rt.o.Shards.Store(n); !held {
		return misdirected(n, "node %s has no replica of it", rt.o.Node)
	}
	if !rt.leads(n) {
		return rt.notLeading(n)
	}
	if read {
		return rt.barrier(ctx, n)
	}
	return nil
}

// barrier is the read barrier of this node's replica of shard n.
func (rt *Router) barrier(ctx context.Context, n int) error {
	if err := rt.o.Replicas.ReadIndex(ctx, n); err != nil {
		if errors.Is(err, store.ErrNotLeader) {
			return noLeader(n, "this node's replica stopped leading it: %v", err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return noLeader(n, "a read barrier failed: %v", err)
	}
	return nil
}

// leaderLocal serves replicated shard n here, held and led by this
// node; a read after the read barrier. Writes need no fence: the store
// proposes them in the term of its lease, and the log decides.
func (rt *Router) leaderLocal(r *http.Request, n int) (*http.Request, api.Shard, error) {
	if err := rt.checkLeader(r.Context(), n, isRead(r)); err != nil {
		return r, api.Shard{}, err
	}
	st, _ := rt.o.Shards.Store(n)
	sh := api.Shard{Store: st, Retention: rt.retentionOf(n)}
	sh.Blobs, _ = rt.o.Shards.Blobs(n)
	return r, sh, nil
}

// leaderTarget is where replicated shard n is served: the node of its
// leader record, with the term as the epoch its call carries.
func (rt *Router) leaderTarget(st state, n int) (string, int64, error) {
	l, ok := st.leaders[n]
	switch {
	case !ok:
		return "", 0, noLeader(n, "no replica leads it now (an election is under way, or most of its replicas are down)")
	case l.Node == rt.o.Node:
		// The record names this node, whose replica does not serve
		// (yet, or any more): a record lags its election.
		return "", 0, noLeader(n, "this node's replica of term %d does not serve it now", l.Term)
	}
	url := st.nodes[l.Node]
	if url == "" {
		return "", 0, noLeader(n, "its leader %s is not registered", l.Node)
	}
	return url, int64(l.Term), nil
}

// readHere is the read barrier of shard n served here: none for a shard
// of one copy, whose owner's store is the shard.
func (rt *Router) readHere(ctx context.Context, n int) error {
	if !rt.grouped(n) {
		return nil
	}
	return rt.barrier(ctx, n)
}
