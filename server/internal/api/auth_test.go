package api

import (
	"net/http"
	"testing"
)

func TestAPIKey(t *testing.T) {
	e := newEnv(t, Options{APIKey: "public-key", AdminToken: "admin-token", Retention: &fakeRetention{}})

	for _, c := range []struct {
		name, auth string
		want       int
	}{
		{"missing", "", http.StatusUnauthorized},
		{"wrong", "Bearer public-kex", http.StatusUnauthorized},
		{"prefix of the key", "Bearer public", http.StatusUnauthorized},
		{"longer than the key", "Bearer public-key-and-more", http.StatusUnauthorized},
		{"wrong scheme", "Basic public-key", http.StatusUnauthorized},
		{"no token", "Bearer ", http.StatusUnauthorized},
		{"admin token is not the API key", "Bearer admin-token", http.StatusUnauthorized},
		{"right", "Bearer public-key", http.StatusOK},
		{"scheme is case-insensitive", "bearer public-key", http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.send(t, "GET", "/v1/threads", "", c.auth)
			if r.status != c.want {
				t.Fatalf("status %d, want %d; body %s", r.status, c.want, r.body)
			}
			if c.want == http.StatusUnauthorized {
				r.errorText(t)
				if r.header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
			}
		})
	}

	// Writes are guarded too, and /healthz and /metrics stay open.
	if r := e.send(t, "POST", "/v1/threads", `{"title":"x","author":"y"}`, ""); r.status != http.StatusUnauthorized {
		t.Fatalf("unauthenticated create: %d", r.status)
	}
	e.expect(t, "GET", "/healthz", "", http.StatusOK)
	e.expect(t, "GET", "/metrics", "", http.StatusOK)
}

func TestNoAPIKeyMeansOpen(t *testing.T) {
	e := newEnv(t, Options{})
	e.expect(t, "GET", "/v1/threads", "", http.StatusOK)
}

func TestAdminToken(t *testing.T) {
	t.Run("unset disables admin", func(t *testing.T) {
		e := newEnv(t, Options{Retention: &fakeRetention{}})
		for _, auth := range []string{"", "Bearer anything"} {
			r := e.send(t, "GET", "/admin/retention", "", auth)
			if r.status != http.StatusForbidden {
				t.Fatalf("auth %q: status %d, want 403", auth, r.status)
			}
			if msg := r.errorText(t); msg != "admin API disabled: set PROGRESSDB_ADMIN_TOKEN" {
				t.Fatalf("message %q", msg)
			}
		}
		if r := e.send(t, "PUT", "/admin/threads/t1/legal_hold", `{"legal_hold":true}`, ""); r.status != http.StatusForbidden {
			t.Fatalf("legal hold without admin: %d", r.status)
		}
	})

	e := newEnv(t, Options{AdminToken: "s3cret", APIKey: "public-key", Retention: &fakeRetention{}})
	for _, c := range []struct {
		name, auth string
		want       int
	}{
		{"missing", "", http.StatusUnauthorized},
		{"wrong", "Bearer s3crex", http.StatusUnauthorized},
		{"API key is not the admin token", "Bearer public-key", http.StatusUnauthorized},
		{"right", "Bearer s3cret", http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.send(t, "GET", "/admin/retention", "", c.auth)
			if r.status != c.want {
				t.Fatalf("status %d, want %d; body %s", r.status, c.want, r.body)
			}
			if c.want != http.StatusOK {
				r.errorText(t)
			}
		})
	}
}

func TestSecretMatches(t *testing.T) {
	s := newSecret("token")
	if newSecret("") != nil {
		t.Fatal("empty token makes a secret")
	}
	for tok, want := range map[string]bool{"token": true, "Token": false, "tok": false, "token ": false, "": false} {
		if got := s.matches(tok); got != want {
			t.Errorf("matches(%q) = %v", tok, got)
		}
	}
}
