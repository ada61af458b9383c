package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/client"
)

// frontNode is a real HTTP server in front of a progressdb server: it
// answers the first arrivals as its script says (503 with Retry-After, as
// a node does while a shard moves; 421) and passes the others on.
type frontNode struct {
	mu       sync.Mutex
	arrivals []time.Time
	script   func(n int, w http.ResponseWriter, r *http.Request) bool // true: answered
}

func newFrontNode(t *testing.T, base string, script func(n int, w http.ResponseWriter) bool) (*frontNode, string) {
	t.Helper()
	return newFrontNodeReq(t, base, func(n int, w http.ResponseWriter, _ *http.Request) bool { return script(n, w) })
}

// newFrontNodeReq is newFrontNode whose script sees the request too.
func newFrontNodeReq(t *testing.T, base string, script func(n int, w http.ResponseWriter, r *http.Request) bool) (*frontNode, string) {
	t.Helper()
	target, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	f := &frontNode{script: script}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.arrivals = append(f.arrivals, time.Now())
		n := len(f.arrivals)
		f.mu.Unlock()
		if !f.script(n, w, r) {
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *frontNode) times() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.arrivals...)
}

func unavailable(w http.ResponseWriter, retryAfter string) {
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-ID", "front-503")
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write([]byte(`{"error": "shard 1 unavailable: moving", "code": "shard_unavailable"}`))
}

// A 503 with Retry-After is tried again no sooner than the server said,
// and a 421 after a backoff; the request (body included) then reaches
// the server once and succeeds.
func TestRetryHonoursRetryAfter(t *testing.T) {
	base := serve(t)
	front, url := newFrontNode(t, base, func(n int, w http.ResponseWriter) bool {
		switch n {
		case 1, 2:
			unavailable(w, "1")
			return true
		case 3:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusMisdirectedRequest)
			w.Write([]byte(`{"error": "shard 1: epoch 5 is not the current one (6)", "code": "misdirected"}`))
			return true
		}
		return false
	})
	c := newClient(t, url)
	ctx := context.Background()
	th := check(c.CreateThread(ctx, client.NewThread{Id: ptr("t-retry"), Title: "Retried", Author: "ann"})).must(t)
	if th.Id != "t-retry" || th.Title != "Retried" {
		t.Fatalf("created %+v", th)
	}
	at := front.times()
	if len(at) != 4 {
		t.Fatalf("%d arrivals, want 4 (503, 503, 421, then the server)", len(at))
	}
	for i := 1; i < 3; i++ {
		if gap := at[i].Sub(at[i-1]); gap < time.Second {
			t.Fatalf("try %d came %v after a Retry-After of 1s", i+1, gap)
		}
	}
	// The 421 has no Retry-After: the fourth try waits the third backoff,
	// Base doubled twice less at most half, so never less than Base.
	if gap := at[3].Sub(at[2]); gap < client.DefaultRetry.Base {
		t.Fatalf("try 4 came %v after a 421, sooner than any backoff", gap)
	}
	// Created once: the server has it, and only one.
	list, _, err := newClient(t, base).ThreadsPage(ctx, client.ListOptions{})
	if err != nil || len(list) != 1 {
		t.Fatalf("threads on the server: %d, %v", len(list), err)
	}
}

// Retries are bounded: after Attempts the 503 is the caller's, with its
// code and Retry-After; a Retry-After beyond Max is not waited for; a
// context that ends stops the wait.
func TestRetryBounded(t *testing.T) {
	base := serve(t)
	ctx := context.Background()

	front, url := newFrontNode(t, base, func(n int, w http.ResponseWriter) bool {
		unavailable(w, "")
		return true
	})
	c := newClient(t, url, client.WithRetry(client.Retry{Attempts: 3, Base: time.Millisecond, Max: 10 * time.Millisecond}))
	e := wantCode(t, errOf(c.GetThread(ctx, "t-1", false)), 503, client.ErrorCodeShardUnavailable)
	if !client.IsRetryable(e) || len(front.times()) != 3 {
		t.Fatalf("retryable %v after %d arrivals, want 3", client.IsRetryable(e), len(front.times()))
	}

	front, url = newFrontNode(t, base, func(n int, w http.ResponseWriter) bool {
		unavailable(w, "3600")
		return true
	})
	c = newClient(t, url)
	e = wantCode(t, errOf(c.GetThread(ctx, "t-1", false)), 503, client.ErrorCodeShardUnavailable)
	if e.RetryAfter != time.Hour || len(front.times()) != 1 {
		t.Fatalf("Retry-After %v past Max, %d arrivals: want it returned at once", e.RetryAfter, len(front.times()))
	}

	// The context ends once the 503 has arrived: during the wait.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	front, url = newFrontNode(t, base, func(n int, w http.ResponseWriter) bool {
		unavailable(w, "5")
		return true
	})
	c = newClient(t, url, client.WithRetry(client.Retry{Attempts: 5, Base: time.Millisecond, Max: time.Hour}),
		client.WithHTTP(&http.Client{Transport: cancelOnAnswer{cancel}}))
	_, err := c.GetThread(cctx, "t-1", false)
	if !errors.Is(err, context.Canceled) || len(front.times()) != 1 {
		t.Fatalf("canceled during the wait: %v after %d arrivals", err, len(front.times()))
	}

	// Retries off.
	front, url = newFrontNode(t, base, func(n int, w http.ResponseWriter) bool {
		unavailable(w, "0")
		return true
	})
	c = newClient(t, url, client.WithRetry(client.Retry{Attempts: 1}))
	wantCode(t, errOf(c.GetThread(ctx, "t-1", false)), 503, client.ErrorCodeShardUnavailable)
	if n := len(front.times()); n != 1 {
		t.Fatalf("%d arrivals without retries", n)
	}
}

// cancelOnAnswer cancels a context once an answer has arrived.
type cancelOnAnswer struct{ cancel context.CancelFunc }

func (c cancelOnAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(req)
	c.cancel()
	return res, err
}

// An append whose connection drops after the server stored it is tried
// again with the same Idempotency-Key, and the server answers it as the
// first: one message, the one the caller is told about.
func TestRetriedAppendIsStoredOnce(t *testing.T) {
	base := serve(t)
	target, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var (
		mu      sync.Mutex
		appends []string // the Idempotency-Key of each append that arrived
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/messages") {
			proxy.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		appends = append(appends, r.Header.Get("Idempotency-Key"))
		first := len(appends) == 1
		mu.Unlock()
		if !first {
			proxy.ServeHTTP(w, r)
			return
		}
		// The server handles the first send; its answer is lost with
		// the connection.
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, r)
		if rec.Code != http.StatusCreated {
			t.Errorf("first send: %d %s", rec.Code, rec.Body)
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	}))
	t.Cleanup(srv.Close)

	ctx := context.Background()
	c := newClient(t, srv.URL, client.WithRetry(client.Retry{Attempts: 3, Base: time.Millisecond, Max: 10 * time.Millisecond}))
	check(c.CreateThread(ctx, client.NewThread{Id: ptr("t-drop"), Title: "Dropped", Author: "ann"})).must(t)
	body := map[string]any{"text": "once"}
	m := check(c.AppendMessage(ctx, "t-drop", client.NewMessage{Author: "bob", Body: body})).must(t)

	mu.Lock()
	keys := append([]string(nil), appends...)
	mu.Unlock()
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Fatalf("appends arrived with keys %q, want two with one key", keys)
	}
	stored, _, err := newClient(t, base).MessagesPage(ctx, "t-drop", client.ListOptions{})
	if err != nil || len(stored) != 1 || stored[0].Id != m.Id {
		t.Fatalf("messages on the server: %+v, %v; want the one answered (%s)", stored, err, m.Id)
	}
	// Another call is another request: a fresh key.
	check(c.AppendMessage(ctx, "t-drop", client.NewMessage{Author: "bob", Body: body})).must(t)
	mu.Lock()
	defer mu.Unlock()
	if len(appends) != 3 || appends[2] == keys[0] {
		t.Fatalf("a second call's key %q, want a fresh one", appends[len(appends)-1])
	}
}
