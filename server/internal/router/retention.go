package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/retention"
)

// ShardRetention is one shard's part of a fanned-out retention route: its
// status, its run's summary or run ID, or why it has none.
type ShardRetention struct {
	Shard  int               `json:"shard"`
	Node   string            `json:"node"`
	Status *retention.Status `json:"status,omitempty"` // GET /admin/retention
	Result *retention.Result `json:"result,omitempty"` // POST /admin/retention/run
	RunID  string            `json:"run_id,omitempty"` // POST /admin/retention/run?wait=false
	Code   int               `json:"code"`             // the HTTP status of this shard's part
	Error  string            `json:"error,omitempty"`
	err    error             // why, for a shard's own answer (runLocal)
}

// ClusterRetention is the answer of the retention admin routes on a
// cluster node: one entry per shard, in shard order.
type ClusterRetention struct {
	Shards []ShardRetention `json:"shards"`
}

// errNoShardRetention: a held shard has no retention service (never in a
// served node; tests may build one so).
var errNoShardRetention = errors.New("retention not configured for this shard")

// RetentionStatus implements api.Cluster: every shard's retention status.
// A shard that cannot answer shows its error in its entry.
func (rt *Router) RetentionStatus(r *http.Request) (any, error) {
	ctx := r.Context()
	if n, ok, err := rt.shardCall(r); ok {
		if err != nil {
			return nil, err
		}
		svc := rt.retentionOf(n)
		if svc == nil {
			return nil, unavailable(n, "%v", errNoShardRetention)
		}
		return svc.Status(ctx)
	}
	out := ClusterRetention{Shards: make([]ShardRetention, rt.o.View.Shards())}
	_ = rt.eachShard(func(n int) error {
		e := &out.Shards[n]
		e.Shard, e.Node = n, rt.servingNode(n)
		if _, ok := rt.here(n); ok {
			svc := rt.retentionOf(n)
			if svc == nil {
				e.Code, e.Error = http.StatusServiceUnavailable, errNoShardRetention.Error()
				return nil
			}
			st, err := svc.Status(ctx)
			if err != nil {
				e.Code, e.Error = http.StatusInternalServerError, err.Error()
				return nil
			}
			e.Code, e.Status = http.StatusOK, &st
			return nil
		}
		var st retention.Status
		code, msg, err := rt.ask(ctx, r, n, http.MethodGet, "/admin/retention", nil, &st, false)
		e.fill(code, msg, err)
		if e.Code == http.StatusOK {
			e.Status = &st
		}
		return nil
	})
	return out, nil
}

func (e *ShardRetention) fill(code int, msg string, err error) {
	if err != nil {
		code, msg = http.StatusServiceUnavailable, err.Error()
		if s, ok := err.(interface{ HTTPStatus() int }); ok {
			code = s.HTTPStatus()
		}
	}
	e.Code, e.Error = code, msg
}

// RetentionRun implements api.Cluster: runs every shard's retention at
// once, each on its owner, and answers every shard's summary or why it has
// none, with the status a single node would have answered for it; the
// answer itself is 200 (202 for wait=false) whatever each shard's outcome.
func (rt *Router) RetentionRun(r *http.Request, req retention.RunRequest, wait bool) (int, any, error) {
	ctx := r.Context()
	ok := http.StatusOK
	if !wait {
		ok = http.StatusAccepted
	}
	if n, isCall, err := rt.shardCall(r); isCall {
		if err != nil {
			return 0, nil, err
		}
		e := rt.runLocal(r, n, req, wait)
		if e.Error != "" && e.Result == nil {
			return 0, nil, &routeError{e.Code, runCode(e.err), e.Error, e.err}
		}
		if !wait {
			return e.Code, map[string]string{"run_id": e.RunID}, nil
		}
		return e.Code, e.Result, nil
	}
	body, err := json.Marshal(map[string]bool{"dry_run": req.DryRun})
	if err != nil {
		return 0, nil, err
	}
	uri := "/admin/retention/run"
	if !wait {
		uri += "?wait=false"
	}
	out := ClusterRetention{Shards: make([]ShardRetention, rt.o.View.Shards())}
	_ = rt.eachShard(func(n int) error {
		e := &out.Shards[n]
		if _, here := rt.here(n); here {
			*e = rt.runLocal(r, n, req, wait)
		} else {
			var res retention.Result
			var started struct {
				RunID string `json:"run_id"`
			}
			var dst any = &res
			if !wait {
				dst = &started
			}
			code, msg, err := rt.ask(ctx, r, n, http.MethodPost, uri, bytes.Clone(body), dst, wait)
			e.fill(code, msg, err)
			switch {
			case e.Code == ok && wait:
				e.Result = &res
			case e.Code == ok:
				e.RunID = started.RunID
			}
		}
		e.Shard, e.Node = n, rt.servingNode(n)
		return nil
	})
	return ok, out, nil
}

// servingNode is the node that serves shard n as this node knows it: its
// leader's for a replicated shard (its home's while no leader is
// known), its home's otherwise.
func (rt *Router) servingNode(n int) string {
	st := rt.o.View.state()
	if st.m.Replicated() {
		if l, ok := st.leaders[n]; ok {
			return l.Node
		}
	}
	return st.m.Homes[n]
}

// runLocal runs held shard n's retention.
func (rt *Router) runLocal(r *http.Request, n int, req retention.RunRequest, wait bool) ShardRetention {
	e := ShardRetention{Shard: n, Node: rt.o.Node}
	svc := rt.retentionOf(n)
	if svc == nil {
		e.Code, e.Error, e.err = http.StatusServiceUnavailable, errNoShardRetention.Error(), errNoShardRetention
		return e
	}
	if !wait {
		id, err := svc.Start(r.Context(), req)
		if err != nil {
			e.Code, e.Error, e.err = runStatus(err), err.Error(), err
			return e
		}
		e.Code, e.RunID = http.StatusAccepted, id
		return e
	}
	res, err := svc.Run(r.Context(), req)
	rt.Failed(err) // a purge batch refused by the fence counts as one
	if err != nil {
		e.Code, e.Error, e.err = runStatus(err), err.Error(), err
		if res.RunID != "" {
			e.Result = &res
		}
		return e
	}
	e.Code, e.Result = http.StatusOK, &res
	return e
}

// runCode is the code a single node answers for a run's error.
func runCode(err error) api.Code {
	switch {
	case errors.Is(err, retention.ErrLeaseHeld):
		return api.CodeLeaseHeld
	case errors.Is(err, retention.ErrDisabled):
		return api.CodeRetentionDisabled
	case errors.Is(err, retention.ErrPaused):
		return api.CodeRetentionPaused
	case errors.Is(err, retention.ErrClosed):
		return api.CodeUnavailable
	case errors.Is(err, errNoShardRetention):
		return api.CodeNotConfigured
	default:
		return api.CodeInternal
	}
}

// runStatus is the status a single node answers for a run's error.
func runStatus(err error) int {
	switch {
	case errors.Is(err, retention.ErrLeaseHeld), errors.Is(err, retention.ErrDisabled), errors.Is(err, retention.ErrPaused):
		return http.StatusConflict
	case errors.Is(err, retention.ErrClosed):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}
