package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/cluster"
)

// moveReplica moves a replicated shard's replica from its home to node to
// as membership changes (docs/replication-design.md §8): the shard's set
// in etcd gets a replica on to and marks the home's leaving; the group's
// leader adds the new one as a learner, catches it up, promotes it and
// removes the old one, whose node deletes its folder. The answer waits
// for the set to show the old replica gone; its result has no epochs or
// backup (a replicated shard has no ownership, and nothing is restored).
func (rt *Router) moveReplica(ctx context.Context, m cluster.Map, n int, to string) (bool, any, error) {
	from := m.Homes[n]
	c, k := rt.o.View.c, rt.o.View.k
	if _, err := cluster.MoveReplica(ctx, c, k, n, from, to); err != nil {
		switch {
		case errors.Is(err, cluster.ErrMoveInProgress):
			return false, nil, &routeError{http.StatusConflict, api.CodeMoveInProgress, err.Error(), err}
		case errors.Is(err, cluster.ErrMembershipChange):
			return false, nil, &routeError{http.StatusBadRequest, api.CodeInvalidField, err.Error(), err}
		default:
			return false, nil, &routeError{http.StatusServiceUnavailable, api.CodeMoveFailed, fmt.Sprintf("shard %d stays on %s: %v", n, from, err), err}
		}
	}
	rt.o.Logger.Info("cluster_replica_move_started", "shard", n, "from", from, "to", to)
	// The move goes on if the client leaves: the leader finishes it.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), moveTimeout)
	defer cancel()
	res := cluster.MoveResult{Shard: n, From: from, To: to}
	settled, err := cluster.WaitSettled(wctx, c, k, n)
	if r, ok := settled.ReplicaOn(n, to); err == nil && (!ok || r.Leaving) {
		// Its node stayed down past DEAD_AFTER before the new replica
		// caught up: the leader cancelled the move (cluster.CancelAdded).
		msg := fmt.Sprintf("shard %d stays on %s: node %s went down before its replica caught up, and the move was cancelled", n, from, to)
		return false, nil, &routeError{http.StatusServiceUnavailable, api.CodeMoveFailed, msg, cluster.ErrMoveCancelled}
	}
	if err != nil {
		res.RemoveErr = fmt.Sprintf("the move is recorded and its group's leader goes on with it, but it did not end in time: %v", err)
	} else {
		res.Removed = true
	}
	return false, res, nil
}
