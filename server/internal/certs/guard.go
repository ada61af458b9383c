package certs

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Guard checks the client certificates a route needs before any handler
// runs (spec §14): a node-to-node call needs a certificate signed by the
// cluster CA that names the calling node's advertise host; an admin route
// needs one signed by the client CA (besides the admin token, which the
// API checks). Other routes need none.
type Guard struct {
	// Admin is the client CA of the admin routes; nil: they need no
	// client certificate.
	Admin *x509.CertPool
	// Nodes is the cluster CA; nil: node calls are not checked here (no
	// mutual TLS between the nodes).
	Nodes *x509.CertPool
	// NodeCall reports whether r is a call from another node.
	NodeCall func(r *http.Request) bool
	// CallerHost is the advertise host of the node r says it comes from.
	CallerHost func(r *http.Request) (string, error)
	Logger     *slog.Logger
	// Now is the clock certificates are checked at (time.Now when nil).
	Now func() time.Time
	// IDs makes the X-Request-ID of a refusal whose request brought none
	// (spec §7: every answer carries one); required.
	IDs *store.IDSource

	cache verifyCache
}

// verifyCache keeps what Verify said of a connection's certificate for a
// while: a connection presents the same certificate (the same
// *x509.Certificate) on every request, and checking its chain's
// signatures on each would cost more than the forwarding it guards.
type verifyCache struct {
	mu sync.Mutex
	m  map[verifyKey]verifyResult
}

type verifyKey struct {
	leaf *x509.Certificate
	pool *x509.CertPool
}

type verifyResult struct {
	err error
	at  time.Time
}

// A verification is reused for a minute, and only while the certificate
// is valid; the cache is emptied when it holds this many.
const (
	verifyCacheTTL = time.Minute
	verifyCacheMax = 4096
)

// verify is Verify, reusing a recent answer for the same certificate.
func (c *verifyCache) verify(cs *tls.ConnectionState, pool *x509.CertPool, now time.Time) error {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		_, err := Verify(cs, pool, now)
		return err
	}
	leaf := cs.PeerCertificates[0]
	k := verifyKey{leaf, pool}
	c.mu.Lock()
	r, ok := c.m[k]
	c.mu.Unlock()
	if ok && now.Sub(r.at) < verifyCacheTTL && now.Before(leaf.NotAfter) && !now.Before(r.at) {
		return r.err
	}
	_, err := Verify(cs, pool, now)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= verifyCacheMax {
		c.m = make(map[verifyKey]verifyResult)
	}
	c.m[k] = verifyResult{err: err, at: now}
	c.mu.Unlock()
	return err
}

// Handler wraps next with the checks.
func (g *Guard) Handler(next http.Handler) http.Handler {
	now := g.Now
	if now == nil {
		now = time.Now
	}
	logger := g.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.Nodes != nil && g.NodeCall != nil && g.NodeCall(r) {
			if err := g.checkNode(r, now()); err != nil {
				id := api.RequestIDFor(r, g.IDs)
				logger.Warn("tls_node_call_refused", "request_id", id, "remote", r.RemoteAddr, "path", r.URL.Path, "err", err)
				refuse(w, id, http.StatusForbidden, api.CodeNotANode, "node-to-node calls need a node certificate signed by the cluster CA that names the calling node's advertise host: "+err.Error())
				return
			}
			// A node's call was checked as one: the admin routes it
			// forwards carry the client's admin token, checked by the API.
			next.ServeHTTP(w, r)
			return
		}
		if g.Admin != nil && adminPath(r.URL.Path) {
			if err := g.cache.verify(r.TLS, g.Admin, now()); err != nil {
				id := api.RequestIDFor(r, g.IDs)
				logger.Warn("tls_admin_call_refused", "request_id", id, "remote", r.RemoteAddr, "path", r.URL.Path, "err", err)
				refuse(w, id, http.StatusUnauthorized, api.CodeUnauthorized, "the admin routes need a client certificate signed by the server's client CA: "+err.Error())
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// checkNode checks the certificate of a node's call.
func (g *Guard) checkNode(r *http.Request, now time.Time) error {
	if err := g.cache.verify(r.TLS, g.Nodes, now); err != nil {
		return err
	}
	leaf := r.TLS.PeerCertificates[0]
	host, err := g.CallerHost(r)
	if err != nil {
		return err
	}
	if err := leaf.VerifyHostname(host); err != nil {
		return fmt.Errorf("the certificate does not name the calling node's advertise host: %w", err)
	}
	return nil
}

// adminPath reports whether path is an admin route's. The API refuses
// paths with empty, "." or ".." segments, so the prefix is the route.
func adminPath(path string) bool {
	return path == "/admin" || strings.HasPrefix(path, "/admin/")
}

// refuse answers with the API's error shape (spec §7): 403 not_a_node
// for a node call, 401 unauthorized for an admin call (a credential is
// missing), as for a missing token.
func refuse(w http.ResponseWriter, requestID string, status int, code api.Code, msg string) {
	w.Header().Set(api.RequestIDHeader, requestID)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": string(code)})
}
