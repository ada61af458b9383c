package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// InternalPrefix starts every route that is for the nodes only: move
// steps, raft streams.
const InternalPrefix = "/internal/"

// NodeCall is IsNodeCall, for the node's guard.
func (rt *Router) NodeCall(r *http.Request) bool { return IsNodeCall(r) }

// IsNodeCall reports whether r is a call from another node: it carries a
// node header or asks for a node-only route. With mutual TLS between the
// nodes, such a call is checked against the cluster CA before any
// handler runs (certs.Guard).
func IsNodeCall(r *http.Request) bool {
	if strings.HasPrefix(r.URL.Path, InternalPrefix) {
		return true
	}
	for _, h := range nodeHeaders {
		if _, ok := r.Header[http.CanonicalHeaderKey(h)]; ok {
			return true
		}
	}
	return false
}

// errUnknownCaller: a node call names no running node.
var errUnknownCaller = errors.New("the call names no running node")

// callerRefresh bounds the etcd read for a caller this node's view does
// not know yet (a node that has just started).
const callerRefresh = 5 * time.Second

// CallerHost is the host of the advertise URL of the node r says it comes
// from (its node header), as registered in etcd: the host its certificate
// must name.
func (rt *Router) CallerHost(r *http.Request) (string, error) {
	id := r.Header.Get(HeaderNode)
	if id == "" {
		return "", fmt.Errorf("%w: no %s header", errUnknownCaller, HeaderNode)
	}
	u, ok := rt.o.View.NodeURL(id)
	if !ok {
		ctx, cancel := context.WithTimeout(r.Context(), callerRefresh)
		defer cancel()
		if err := rt.o.View.Refresh(ctx); err != nil {
			rt.o.Metrics.etcdErrors.Inc()
			return "", fmt.Errorf("the cluster state cannot be read: %w", err)
		}
		if u, ok = rt.o.View.NodeURL(id); !ok {
			return "", fmt.Errorf("%w: node %q is not registered", errUnknownCaller, id)
		}
	}
	parsed, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("node %q advertises %q: %w", id, u, err)
	}
	return parsed.Hostname(), nil
}
