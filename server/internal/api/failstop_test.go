package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// /healthz must not answer ok for a store that cannot commit.
func TestHealthzFailsWhenTheStoreCannotCommit(t *testing.T) {
	e := newEnv(t, Options{})
	e.expect(t, "GET", "/healthz", "", http.StatusOK)
	if err := e.store.Close(); err != nil {
		t.Fatal(err)
	}
	r := e.expect(t, "GET", "/healthz", "", http.StatusServiceUnavailable)
	if !strings.Contains(string(r.body), `"status":"unavailable"`) || r.errorCode(t) != CodeUnavailable {
		t.Fatalf("healthz body %s", r.body)
	}
}

// A panic raised inside Pebble is never recovered into a 500: it goes to
// the store's fail-stop (Options.Fatal; the process exits in production).
func TestPanicInsidePebbleStopsTheProcess(t *testing.T) {
	var fatal atomic.Value
	st, err := store.Open(t.TempDir(), store.Options{Fatal: func(detail string) { fatal.Store(detail) }})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	// Pebble closed under the store: its next read panics inside Pebble.
	if err := st.DB().Close(); err != nil {
		t.Fatal(err)
	}
	// The test's Fatal returns, so the handler still panics and net/http
	// breaks the connection; in production the process is gone by then.
	if resp, err := srv.Client().Get(srv.URL + "/v1/threads/t1"); err == nil {
		resp.Body.Close()
	}
	got, _ := fatal.Load().(string)
	if !strings.Contains(got, "closed") {
		t.Fatalf("Fatal called with %q, want the Pebble panic", got)
	}
}
