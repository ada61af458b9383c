package router

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Node headers: a node's call to another carries the cluster secret, the
// epoch it believes the shard's owner holds, and for a fan-out the shard
// it asks about. They are honoured only with the secret and never reach a
// handler.
const (
	HeaderSecret = "X-Progressdb-Cluster-Secret"
	HeaderEpoch  = "X-Progressdb-Epoch"
	HeaderShard  = "X-Progressdb-Shard"
	HeaderNode   = "X-Progressdb-Node"
)

var nodeHeaders = []string{HeaderSecret, HeaderEpoch, HeaderShard, HeaderNode}

// dialTimeout bounds connecting to another node.
const dialTimeout = 5 * time.Second

// Options configure a Router.
type Options struct {
	Node   string // this node's ID
	Secret string // PROGRESSDB_CLUSTER_SECRET
	View   *View
	Shards *cluster.Shards // the shards this node holds
	Owner  *cluster.Owner  // this node's ownership of them
	// Retention returns held shard n's retention service (nil: none). A
	// function, so that shards can come and go while the node runs.
	Retention func(n int) retention.Service
	// Erasures records the cluster's subject erasures (spec §11.1); nil
	// when sealing is off.
	Erasures *cluster.Erasures
	// Mover is this node's part in moving shards (nil: it takes none).
	Mover *cluster.Node
	// Replicas is this node's part in replicated shards (leaders.go);
	// nil when the cluster's shards have one copy each.
	Replicas Replicas
	// Client calls the other nodes (a client with timeouts when nil,
	// over TLS with TLS when set).
	Client       *http.Client
	TLS          *tls.Config
	Logger       *slog.Logger
	Metrics      *Metrics
	MaxBodyBytes int64 // api.DefaultMaxBodyBytes when 0
	// RequestTimeout bounds a call to another node (DefaultRequestTimeout
	// when 0), so that a frozen owner answers 503 instead of holding the
	// request; retention runs, which may take minutes, are not bounded.
	RequestTimeout time.Duration
}

// DefaultRequestTimeout bounds a call to another node.
const DefaultRequestTimeout = 30 * time.Second

// Router is the api.Cluster of a node.
type Router struct {
	o      Options
	secret Secret
}

var _ api.Cluster = (*Router)(nil)

// New builds a node's router.
func New(o Options) (*Router, error) {
	switch {
	case o.View == nil || o.Shards == nil || o.Owner == nil:
		return nil, errors.New("router: View, Shards and Owner are required")
	case o.Secret == "":
		return nil, errors.New("router: empty cluster secret")
	}
	if o.Client == nil {
		// No overall timeout: a forwarded retention run may take minutes.
		// A node that does not take the connection is down: 503 soon.
		o.Client = &http.Client{Transport: &http.Transport{
			Proxy:               nil, // node to node, never through a proxy
			DialContext:         (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
			IdleConnTimeout:     90 * time.Second,
			MaxIdleConnsPerHost: 32,
			TLSClientConfig:     o.TLS,
			TLSHandshakeTimeout: dialTimeout,
			// A streamed upload waits this long for the owner's 100
			// Continue: an owner refusing it (421) has not read it, so
			// it can be sent to the new owner.
			ExpectContinueTimeout: dialTimeout,
			// HTTP/2 to the other nodes when they serve TLS: one
			// connection carries every forwarded call.
			ForceAttemptHTTP2: o.TLS != nil,
		}}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil, nil)
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = api.DefaultMaxBodyBytes
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	return &Router{o: o, secret: NewSecret(o.Secret)}, nil
}

// routeError is an answer of the router itself, with its status and code.
type routeError struct {
	status int
	code   api.Code
	msg    string
	err    error
}

func (e *routeError) Error() string       { return e.msg }
func (e *routeError) Unwrap() error       { return e.err }
func (e *routeError) HTTPStatus() int     { return e.status }
func (e *routeError) ErrorCode() api.Code { return e.code }

var _ api.StatusError = (*routeError)(nil)

// Sentinels of the router's answers.
var (
	// ErrShardUnavailable: the shard's owner is down or unreachable (503).
	ErrShardUnavailable = errors.New("shard unavailable")
	// ErrMisdirected: a node forwarded with an epoch that is not the
	// shard's current one here (421); it retries with the current map.
	ErrMisdirected = errors.New("misdirected request")
	// ErrNotNode: a request carried node headers without the secret.
	ErrNotNode = errors.New("node headers without the cluster secret")
)

func unavailable(n int, format string, args ...any) error {
	return &routeError{http.StatusServiceUnavailable, api.CodeShardUnavailable,
		fmt.Sprintf("shard %d unavailable: ", n) + fmt.Sprintf(format, args...), ErrShardUnavailable}
}

// retryAfterSeconds is the Retry-After of a write refused while its shard
// moves: a move takes seconds.
const retryAfterSeconds = "1"

// movingError refuses a write to a shard while it is moved (503 with
// Retry-After, spec §11).
type movingError struct{ *routeError }

func moving(n int) error {
	return movingError{&routeError{http.StatusServiceUnavailable, api.CodeShardUnavailable,
		fmt.Sprintf("shard %d unavailable: it is being moved to another node; writes resume once it is, reads go on", n),
		fmt.Errorf("%w: %w", ErrShardUnavailable, cluster.ErrMoving)}}
}

// switching refuses a request to a shard its home is making a group of
// (503 with Retry-After, as a move).
func switching(n int) error {
	return movingError{&routeError{http.StatusServiceUnavailable, api.CodeShardUnavailable,
		fmt.Sprintf("shard %d unavailable: no node owns it now; its home is making it a replicated group, or is down", n),
		ErrShardUnavailable}}
}

func misdirected(n int, format string, args ...any) error {
	return &routeError{http.StatusMisdirectedRequest, api.CodeMisdirected,
		fmt.Sprintf("shard %d: ", n) + fmt.Sprintf(format, args...), ErrMisdirected}
}

// nodeCall is what a request from another node asks, read by Admit.
type nodeCall struct {
	from  string
	epoch int64 // 0: none
	shard int   // -1: none
}

type nodeCallKey struct{}

func nodeCallOf(ctx context.Context) (nodeCall, bool) {
	c, ok := ctx.Value(nodeCallKey{}).(nodeCall)
	return c, ok
}

// Admit implements api.Cluster: node headers count only with the secret
// (compared in constant time) and are always removed from the request.
func (rt *Router) Admit(r *http.Request) (*http.Request, error) {
	// Made only when a node header is there: most requests come from
	// clients and carry none.
	var vals map[string]string
	for _, h := range nodeHeaders {
		if _, ok := r.Header[http.CanonicalHeaderKey(h)]; ok {
			if vals == nil {
				vals = make(map[string]string, len(nodeHeaders))
			}
			vals[h] = r.Header.Get(h)
			r.Header.Del(h)
		}
	}
	if vals == nil {
		return r, nil
	}
	if !rt.secret.Matches(vals[HeaderSecret]) {
		return nil, &routeError{http.StatusForbidden, api.CodeNotANode, "node headers (" + HeaderSecret + ", " + HeaderEpoch + ", " +
			HeaderShard + ", " + HeaderNode + ") are for the cluster's nodes only", ErrNotNode}
	}
	c := nodeCall{from: vals[HeaderNode], shard: -1}
	if v := vals[HeaderEpoch]; v != "" {
		e, err := strconv.ParseInt(v, 10, 64)
		if err != nil || e < 1 {
			return nil, &routeError{http.StatusBadRequest, api.CodeInvalidParameter, HeaderEpoch + " must be a positive integer", ErrNotNode}
		}
		c.epoch = e
	}
	if v := vals[HeaderShard]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n >= rt.o.View.Shards() {
			return nil, &routeError{http.StatusBadRequest, api.CodeInvalidParameter, HeaderShard + " must name a shard", ErrNotNode}
		}
		c.shard = n
	}
	return r.WithContext(context.WithValue(r.Context(), nodeCallKey{}, c)), nil
}

func isRead(r *http.Request) bool { return r.Method == http.MethodGet || r.Method == http.MethodHead }

// local returns shard n, held here as st, for a request this node serves
// itself: with the shard's epoch on the context when it owns the shard; a
// read goes on without ownership (the data is here), a write does not.
func (rt *Router) local(r *http.Request, n int, st *store.Store) (*http.Request, api.Shard, error) {
	sh := api.Shard{Store: st, Retention: rt.retentionOf(n)}
	sh.Blobs, _ = rt.o.Shards.Blobs(n) // nil when the shard has none
	ctx, err := rt.o.Owner.Fence(r.Context(), n)
	switch {
	case err == nil:
		return r.WithContext(ctx), sh, nil
	case isRead(r):
		return r, sh, nil
	case errors.Is(err, cluster.ErrMoving):
		return r, sh, moving(n)
	default:
		return r, sh, unavailable(n, "this node holds it but does not own it now (%v); writes wait for its ownership", err)
	}
}

// Thread implements api.Cluster.
func (rt *Router) Thread(w http.ResponseWriter, r *http.Request, tid string) (*http.Request, api.Shard, bool, error) {
	r, sh, answered, err := rt.thread(w, r, tid)
	var mv movingError
	if errors.As(err, &mv) {
		w.Header().Set("Retry-After", retryAfterSeconds)
	}
	return r, sh, answered, err
}

func (rt *Router) thread(w http.ResponseWriter, r *http.Request, tid string) (*http.Request, api.Shard, bool, error) {
	n := cluster.ShardOf(tid, rt.o.View.Shards())
	if call, ok := nodeCallOf(r.Context()); ok {
		// Forwarded by a node: served here or refused, never forwarded on.
		if rt.grouped(n) {
			r, sh, err := rt.leaderLocal(r, n)
			return r, sh, err != nil, err
		}
		if err := rt.checkCall(n, call, isRead(r)); err != nil {
			return r, api.Shard{}, true, err
		}
		st, _ := rt.o.Shards.Store(n)
		r, sh, err := rt.local(r, n, st)
		return r, sh, err != nil, err
	}
	if st, ok := rt.here(n); ok {
		if rt.grouped(n) {
			r, sh, err := rt.leaderLocal(r, n)
			return r, sh, err != nil, err
		}
		r, sh, err := rt.local(r, n, st)
		return r, sh, err != nil, err
	}
	if api.Streamed(r) {
		return r, api.Shard{}, true, rt.forwardStream(w, r, n)
	}
	return r, api.Shard{}, true, rt.forward(w, r, n)
}

// checkCall refuses a node's call about shard n unless this node owns it
// with the epoch the caller believes. A read goes on while the shard is
// frozen for a move: its data is here and does not change.
func (rt *Router) checkCall(n int, call nodeCall, read bool) error {
	if _, held := rt.o.Shards.Store(n); !held {
		return misdirected(n, "node %s does not hold it", rt.o.Node)
	}
	e, err := rt.o.Owner.Epoch(n)
	switch {
	case errors.Is(err, cluster.ErrMoving) && read:
		return nil
	case errors.Is(err, cluster.ErrMoving):
		return moving(n)
	case err != nil:
		return unavailable(n, "its owner %s is not holding it now: %v", rt.o.Node, err)
	}
	if call.epoch != e {
		return misdirected(n, "epoch %d is not the current one (%d)", call.epoch, e)
	}
	return nil
}

// target is where shard n is served: its owner's URL and epoch.
func (rt *Router) target(n int) (url string, epoch int64, err error) {
	st := rt.o.View.state()
	if n >= st.m.Shards {
		return "", 0, unavailable(n, "not in the shard map")
	}
	if st.m.Grouped(n) {
		return rt.leaderTarget(st, n)
	}
	o, owned := st.owners[n]
	switch {
	case !owned && st.m.Growing(n):
		// Its home may be switching it into a group: the ownership
		// ends there with the switch, and its leader comes seconds after.
		return "", 0, switching(n)
	case !owned:
		return "", 0, unavailable(n, "no node owns it (its home %s is down or has not taken it yet)", st.m.Homes[n])
	case o.URL == "":
		return "", 0, unavailable(n, "its owner %s has no advertised URL", o.Node)
	}
	return o.URL, o.epoch, nil
}

// hop-by-hop headers are not forwarded (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// call sends one request about shard n to its owner, retrying once with the
// current state from etcd when the owner answers 421. The caller closes
// the response body.
func (rt *Router) call(ctx context.Context, n int, method, uri string, h http.Header, body []byte) (*http.Response, error) {
	return rt.callWith(ctx, n, method, uri, h, func(int) (io.Reader, int64, error) {
		return bytes.NewReader(body), int64(len(body)), nil
	})
}

// callWith is call with a body made for each attempt by body (a reader
// and its length, -1 unknown); an error from body ends the call.
func (rt *Router) callWith(ctx context.Context, n int, method, uri string, h http.Header,
	body func(attempt int) (io.Reader, int64, error)) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		url, epoch, err := rt.target(n)
		if err != nil && attempt == 0 {
			// The watch may not have delivered a new owner yet: ask etcd.
			if rerr := rt.o.View.Refresh(ctx); rerr != nil {
				rt.o.Metrics.etcdErrors.Inc()
			}
			url, epoch, err = rt.target(n)
		}
		if err != nil {
			rt.o.Metrics.forwarded.WithLabelValues("unavailable").Inc()
			return nil, err
		}
		br, size, err := body(attempt)
		if err != nil {
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, method, url+uri, br)
		if err != nil {
			return nil, fmt.Errorf("forward to shard %d: %w", n, err)
		}
		req.ContentLength = size
		if size == 0 {
			req.Body = http.NoBody
		}
		for k, v := range h {
			req.Header[k] = v
		}
		for _, k := range hopHeaders {
			req.Header.Del(k)
		}
		req.Header.Set(HeaderSecret, rt.o.Secret)
		req.Header.Set(HeaderEpoch, strconv.FormatInt(epoch, 10))
		req.Header.Set(HeaderNode, rt.o.Node)
		resp, err := rt.o.Client.Do(req)
		if err != nil {
			// A streamed call's silence ends it with a deadline as its
			// cause (forwardStream).
			if errors.Is(context.Cause(ctx), context.Canceled) {
				return nil, ctx.Err() // the client went away
			}
			rt.o.Metrics.forwarded.WithLabelValues("unavailable").Inc()
			if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
				return nil, unavailable(n, "its owner at %s did not answer in time", url)
			}
			return nil, unavailable(n, "its owner at %s does not answer: %v", url, err)
		}
		if resp.StatusCode != http.StatusMisdirectedRequest || attempt > 0 {
			result := "ok"
			if resp.StatusCode == http.StatusMisdirectedRequest {
				result = "misdirected"
			}
			rt.o.Metrics.forwarded.WithLabelValues(result).Inc()
			return resp, nil
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		rt.o.Metrics.forwarded.WithLabelValues("retried").Inc()
		if err := rt.o.View.Refresh(ctx); err != nil {
			rt.o.Metrics.etcdErrors.Inc()
			return nil, unavailable(n, "the cluster state cannot be read: %v", err)
		}
	}
}

// forward answers r with the answer of shard n's owner.
func (rt *Router) forward(w http.ResponseWriter, r *http.Request, n int) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, rt.o.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &routeError{http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge,
				fmt.Sprintf("request body too large: the limit is %d bytes", tooBig.Limit), err}
		}
		return &routeError{http.StatusBadRequest, api.CodeInvalidJSON, "reading the request body: " + err.Error(), err}
	}
	h := r.Header.Clone()
	h.Del("Host")
	ctx, cancel := context.WithTimeout(r.Context(), rt.o.RequestTimeout)
	defer cancel()
	resp, err := rt.call(ctx, n, r.Method, r.URL.RequestURI(), h, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_ = relay(w, resp) // a cut answer: one side went away
	return nil
}

// ForwardShard implements api.Cluster: the owner of shard n answers a
// request about it (a backup) that names the shard instead of a thread.
// A node's call is never forwarded on: this node not holding the shard
// means the caller's map is stale (421, and it retries with the current
// one). The answer may be a backup that takes minutes, so only the
// client bounds the call, and an answer cut part way breaks the client's
// connection too, so that a cut archive is never taken for a whole one.
func (rt *Router) ForwardShard(w http.ResponseWriter, r *http.Request, n int) error {
	if _, ok := nodeCallOf(r.Context()); ok {
		return misdirected(n, "node %s does not hold it", rt.o.Node)
	}
	h := r.Header.Clone()
	h.Del("Host")
	resp, err := rt.call(r.Context(), n, r.Method, r.URL.RequestURI(), h, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := relay(w, resp); err != nil {
		panic(http.ErrAbortHandler)
	}
	return nil
}

// relay writes another node's answer as this node's, without the
// hop-by-hop headers. An error means the answer was cut: one side went
// away.
func relay(w http.ResponseWriter, resp *http.Response) error {
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	for _, k := range hopHeaders {
		w.Header().Del(k)
	}
	w.WriteHeader(resp.StatusCode)
	_, err := io.Copy(w, resp.Body)
	return err
}

func (rt *Router) retentionOf(n int) retention.Service {
	if rt.o.Retention == nil {
		return nil
	}
	return rt.o.Retention(n)
}

// Failed implements api.Cluster: it counts fencing refusals (nil: none).
func (rt *Router) Failed(err error) {
	if errors.Is(err, store.ErrFenced) {
		rt.o.Metrics.fenced.Inc()
	}
}

// Check implements api.Cluster: every shard this node holds can commit.
func (rt *Router) Check(ctx context.Context) error {
	for _, n := range rt.o.Shards.Numbers() {
		st, _ := rt.o.Shards.Store(n)
		if err := st.Check(ctx); err != nil {
			return fmt.Errorf("shard %d: %w", n, err)
		}
	}
	return nil
}

// Secret is the cluster secret as node calls are checked against it:
// its hash, compared in constant time.
type Secret [sha256.Size]byte

// NewSecret keeps the cluster secret s for checks.
func NewSecret(s string) Secret { return sha256.Sum256([]byte(s)) }

// Matches reports whether v, a call's HeaderSecret, is the cluster
// secret; an empty one never is.
func (s Secret) Matches(v string) bool {
	got := sha256.Sum256([]byte(v))
	return v != "" && subtle.ConstantTimeCompare(got[:], s[:]) == 1
}
