package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/cluster"
)

// Moving a shard between running nodes (spec §11). POST
// /admin/cluster/shards/{n}/move on any node goes to the target node,
// which runs the move (cluster.MoveShard): it is the move's target
// itself, and reaches the shard's home, the source, through the home's
// move steps (MoveSteps) with the cluster secret: fence, trail, backup,
// release, remove, abort. The target pulls the trail and the backup.

// MoveStepsPath prefixes the move steps a node serves to the others.
const MoveStepsPath = InternalPrefix + "cluster/shards/"

// moveTimeout bounds a whole move: the copy of a large shard takes time,
// a move stuck for longer is undone.
const moveTimeout = time.Hour

// Move implements api.Cluster: it runs the move when this node is the
// target and forwards the request to the target otherwise. answered says
// the answer was written (forwarded).
func (rt *Router) Move(w http.ResponseWriter, r *http.Request, n int, to string, body []byte) (bool, any, error) {
	if rt.o.Mover == nil {
		return false, nil, &routeError{http.StatusServiceUnavailable, api.CodeNotConfigured, "this node cannot take part in moves", ErrShardUnavailable}
	}
	if n < 0 || n >= rt.o.View.Shards() {
		return false, nil, &routeError{http.StatusBadRequest, api.CodeInvalidParameter, fmt.Sprintf("shard %d: the cluster has shards 0 to %d", n, rt.o.View.Shards()-1), cluster.ErrMoveTarget}
	}
	if to != rt.o.Node {
		if _, call := nodeCallOf(r.Context()); call {
			return false, nil, &routeError{http.StatusBadRequest, api.CodeInvalidField, "a move forwarded to node " + rt.o.Node + " names node " + to, cluster.ErrMoveTarget}
		}
		target, err := rt.nodeURL(r.Context(), to)
		if err != nil {
			return false, nil, err
		}
		h := r.Header.Clone()
		h.Del("Host")
		resp, err := rt.callNode(r.Context(), target, http.MethodPost, r.URL.RequestURI(), h, bytes.NewReader(body))
		if err != nil {
			return false, nil, &routeError{http.StatusServiceUnavailable, api.CodeClusterUnavailable, fmt.Sprintf("node %s at %s does not answer: %v", to, target, err), cluster.ErrNodeDown}
		}
		defer resp.Body.Close()
		relay(w, resp)
		return true, nil, nil
	}

	m, err := cluster.ReadMap(r.Context(), rt.o.View.c, rt.o.View.k)
	if err != nil {
		return false, nil, &routeError{http.StatusServiceUnavailable, api.CodeClusterUnavailable, "the shard map cannot be read: " + err.Error(), err}
	}
	if m.Grouped(n) {
		return rt.moveReplica(r.Context(), m, n, to)
	}
	if n >= m.Shards || m.Homes[n] == to {
		return false, nil, &routeError{http.StatusBadRequest, api.CodeInvalidField, fmt.Sprintf("shard %d: node %s holds it already", n, to), cluster.ErrMoveTarget}
	}
	home := m.Homes[n]
	src, err := rt.nodeURL(r.Context(), home)
	if err != nil {
		return false, nil, err
	}
	// The move goes on if the client leaves: undoing it half way is
	// what a failure does, not a choice of the client's.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), moveTimeout)
	defer cancel()
	res, err := cluster.MoveShard(ctx, cluster.MoveOptions{Client: rt.o.View.c, Keys: rt.o.View.k, Shard: n, To: to,
		Source: &remoteSource{rt: rt, url: src}, Target: rt.o.Mover, Logger: rt.o.Logger})
	switch {
	case err == nil:
		return false, res, nil
	case errors.Is(err, cluster.ErrMoveTarget):
		return false, nil, &routeError{http.StatusBadRequest, api.CodeInvalidField, err.Error(), err}
	case errors.Is(err, cluster.ErrMoveInProgress), errors.Is(err, backup.ErrNotEmpty):
		return false, nil, &routeError{http.StatusConflict, api.CodeMoveInProgress, err.Error(), err}
	default:
		return false, nil, &routeError{http.StatusServiceUnavailable, api.CodeMoveFailed, fmt.Sprintf("shard %d stays on %s: %v", n, home, err), err}
	}
}

// nodeURL is where node id answers, from its registration in etcd; 503
// when it is not running.
func (rt *Router) nodeURL(ctx context.Context, id string) (string, error) {
	resp, err := rt.o.View.c.Get(ctx, rt.o.View.k.Node(id))
	if err != nil {
		rt.o.Metrics.etcdErrors.Inc()
		return "", &routeError{http.StatusServiceUnavailable, api.CodeClusterUnavailable, "the cluster state cannot be read: " + err.Error(), err}
	}
	var v struct {
		URL string `json:"url"`
	}
	if len(resp.Kvs) == 0 || json.Unmarshal(resp.Kvs[0].Value, &v) != nil || v.URL == "" {
		return "", &routeError{http.StatusServiceUnavailable, api.CodeClusterUnavailable, "node " + id + " is not running", cluster.ErrNodeDown}
	}
	return v.URL, nil
}

// callNode sends a request to another node with the cluster secret.
func (rt *Router) callNode(ctx context.Context, base, method, uri string, h http.Header, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+uri, body)
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	for _, k := range hopHeaders {
		req.Header.Del(k)
	}
	req.Header.Set(HeaderSecret, rt.o.Secret)
	req.Header.Set(HeaderNode, rt.o.Node)
	return rt.o.Client.Do(req)
}

// remoteSource is a shard's home seen from the node it moves to.
type remoteSource struct {
	rt  *Router
	url string
}

var _ cluster.MoveSource = (*remoteSource)(nil)

// step calls one move step; the answer's body goes to w when set.
func (s *remoteSource) step(ctx context.Context, n int, step string, q url.Values, w io.Writer) error {
	// A home that stops answering (frozen, cut off) fails the move instead
	// of holding it: each step but the streams is bounded (the fence waits
	// that long at most for a run purging the shard to end).
	if step != "trail" && step != "backup" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.rt.o.RequestTimeout)
		defer cancel()
	}
	uri := MoveStepsPath + strconv.Itoa(n) + "/" + step
	if len(q) > 0 {
		uri += "?" + q.Encode()
	}
	resp, err := s.rt.callNode(ctx, s.url, http.MethodPost, uri, nil, nil)
	if err != nil {
		return fmt.Errorf("%s on %s: %w", step, s.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = string(b)
		}
		return fmt.Errorf("%s on %s: %d: %s", step, s.url, resp.StatusCode, e.Error)
	}
	if w != nil {
		if _, err := io.Copy(w, resp.Body); err != nil {
			return fmt.Errorf("%s from %s: %w", step, s.url, err)
		}
	}
	return nil
}

func (s *remoteSource) Fence(ctx context.Context, n int, fence int64) error {
	return s.step(ctx, n, "fence", url.Values{"fence": {strconv.FormatInt(fence, 10)}}, nil)
}

func (s *remoteSource) Backup(ctx context.Context, n int, w io.Writer) (backup.Manifest, error) {
	// The target reads the manifest from the archive it verifies.
	return backup.Manifest{}, s.step(ctx, n, "backup", nil, w)
}

func (s *remoteSource) Trail(ctx context.Context, n int, w io.Writer) error {
	return s.step(ctx, n, "trail", nil, w)
}

func (s *remoteSource) Release(ctx context.Context, n int) error {
	return s.step(ctx, n, "release", nil, nil)
}

func (s *remoteSource) Remove(ctx context.Context, n int, to string, epoch int64) error {
	return s.step(ctx, n, "remove", url.Values{"to": {to}, "epoch": {strconv.FormatInt(epoch, 10)}}, nil)
}

func (s *remoteSource) Abort(ctx context.Context, n int) error {
	return s.step(ctx, n, "abort", nil, nil)
}

// MoveSteps serves this node's part as a move's source to the node the
// shard moves to: POST <MoveStepsPath><n>/<step>, with the cluster secret
// only. They are the nodes' own transport, not part of the API.
func (rt *Router) MoveSteps() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(status int, code api.Code, msg string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": string(code)})
		}
		if !rt.secret.Matches(r.Header.Get(HeaderSecret)) {
			fail(http.StatusForbidden, api.CodeNotANode, "move steps are for the cluster's nodes only")
			return
		}
		if r.Method != http.MethodPost {
			fail(http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "POST only")
			return
		}
		if rt.o.Mover == nil {
			fail(http.StatusServiceUnavailable, api.CodeNotConfigured, "this node cannot take part in moves")
			return
		}
		var n int
		var step string
		if _, err := fmt.Sscanf(r.URL.Path[len(MoveStepsPath):], "%d/%s", &n, &step); err != nil {
			fail(http.StatusNotFound, api.CodeRouteNotFound, "no such move step")
			return
		}
		ctx, q := r.Context(), r.URL.Query()
		var err error
		switch step {
		case "fence":
			var fence int64
			if fence, err = strconv.ParseInt(q.Get("fence"), 10, 64); err == nil {
				err = rt.o.Mover.Fence(ctx, n, fence)
			}
		case "trail", "backup":
			// The answer streams: an error after the first byte cuts the
			// stream, which the target's reader and verification see.
			w.Header().Set("Content-Type", "application/x-tar")
			if step == "trail" {
				err = rt.o.Mover.Trail(ctx, n, w)
			} else {
				_, err = rt.o.Mover.Backup(ctx, n, w)
			}
			if err != nil {
				rt.o.Logger.Error("cluster_move_step_failed", "shard", n, "step", step, "err", err)
				panic(http.ErrAbortHandler) // cut the stream: the target must not take it whole
			}
			return
		case "release":
			err = rt.o.Mover.Release(ctx, n)
		case "remove":
			var epoch int64
			if epoch, err = strconv.ParseInt(q.Get("epoch"), 10, 64); err == nil {
				err = rt.o.Mover.Remove(ctx, n, q.Get("to"), epoch)
			}
		case "abort":
			err = rt.o.Mover.Abort(ctx, n)
		default:
			fail(http.StatusNotFound, api.CodeRouteNotFound, "no such move step")
			return
		}
		if err != nil {
			rt.o.Logger.Error("cluster_move_step_failed", "shard", n, "step", step, "err", err)
			fail(http.StatusConflict, api.CodeMoveFailed, err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
