package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"sync/atomic"
)

// access says which credential a route needs.
type access int

const (
	accessOpen  access = iota // /healthz, /metrics
	accessAPI                 // /v1: the API key, when one is set
	accessAdmin               // /admin: the admin token; disabled without one
)

// secret is a configured bearer token, kept as a SHA-256 digest so that
// comparison takes the same time whatever the length or content of the
// presented token.
type secret [sha256.Size]byte

func newSecret(token string) *secret {
	if token == "" {
		return nil
	}
	d := secret(sha256.Sum256([]byte(token)))
	return &d
}

// Tokens holds the API key and the admin token a handler requires, so
// that they can be replaced while it serves (serve re-reads their files
// on SIGHUP). The zero value requires neither.
type Tokens struct {
	p atomic.Pointer[tokenPair]
}

// tokenPair is what Tokens holds; a nil secret turns its check off.
type tokenPair struct {
	apiKey     *secret // nil: /v1 is open
	adminToken *secret // nil: /admin is disabled
}

// Set replaces both: requests from then on need the new ones ("" turns
// the API key off and disables /admin, as at start).
func (t *Tokens) Set(apiKey, adminToken string) {
	t.p.Store(&tokenPair{apiKey: newSecret(apiKey), adminToken: newSecret(adminToken)})
}

func (t *Tokens) load() tokenPair {
	if p := t.p.Load(); p != nil {
		return *p
	}
	return tokenPair{}
}

func (s *secret) matches(token string) bool {
	d := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(s[:], d[:]) == 1
}

// bearerToken returns the token of an "Authorization: Bearer <token>" header
// (the scheme is case-insensitive, RFC 7235).
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// guard checks the route's credential, then runs h, turning its error into
// the response.
func (s *server) guard(a access, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cluster != nil && a != accessOpen {
			admitted, err := s.cluster.Admit(r)
			if err != nil {
				s.fail(w, r, err)
				return
			}
			r = admitted
		}
		if err := s.authorize(a, r); err != nil {
			s.fail(w, r, err)
			return
		}
		withIdleBody(w, r)
		r, answered, err := s.routeThread(w, r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if answered {
			return
		}
		if a == accessAdmin {
			s.nameDatabase(w, r)
		}
		serve := h
		if st := s.keyedStore(r); st != nil {
			serve = s.keyedHandler(st, h)
		}
		if err := serve(w, r); err != nil {
			s.fail(w, r, err)
		}
	})
}

func (s *server) authorize(a access, r *http.Request) error {
	var want *secret
	tokens := s.tokens.load()
	switch a {
	case accessOpen:
		return nil
	case accessAPI:
		if tokens.apiKey == nil {
			return nil
		}
		want = tokens.apiKey
	case accessAdmin:
		if tokens.adminToken == nil {
			return errAdminDisabled
		}
		want = tokens.adminToken
	}
	token, ok := bearerToken(r)
	if !ok {
		return errMissingToken
	}
	if !want.matches(token) {
		return errWrongToken
	}
	return nil
}
