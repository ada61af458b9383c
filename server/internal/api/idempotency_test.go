package api

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/internal/testtools/testclock"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// sendKeyed sends one request with an Idempotency-Key (none when key is
// ""), checked against api/openapi.yaml like every other.
func (e *testEnv) sendKeyed(t *testing.T, method, path, body, key string) response {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if e.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+e.bearer)
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := response{status: res.StatusCode, header: res.Header, body: b}
	checkAnswer(t, e.seen, req, []byte(body), r)
	return r
}

// sameAnswer checks that again is first given again: status, body and
// Location, marked as a replay.
func sameAnswer(t *testing.T, first, again response) {
	t.Helper()
	if again.status != first.status || !bytes.Equal(again.body, first.body) ||
		again.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("sent again: %d %s (Location %q)\nwant the first: %d %s (Location %q)", again.status, again.body,
			again.header.Get("Location"), first.status, first.body, first.header.Get("Location"))
	}
	if again.header.Get(replayedHeader) != "true" {
		t.Fatalf("a replay without %s: true", replayedHeader)
	}
}

func messageCount(t *testing.T, st *store.Store, tid string) int {
	t.Helper()
	msgs, _, err := st.ListMessages(context.Background(), tid, store.ListOptions{IncludeDeleted: true})
	if err != nil {
		t.Fatal(err)
	}
	return len(msgs)
}

// idemKeys counts the keys' records in the store's files.
func idemKeys(t *testing.T, st *store.Store) int {
	t.Helper()
	it, err := st.DB().NewIter(&pebble.IterOptions{LowerBound: []byte("sys:idem:k:"), UpperBound: []byte("sys:idem:k;")})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	return n
}

func TestIdempotencyKeyReplaysTheFirstAnswer(t *testing.T) {
	e := newEnv(t, Options{})
	create := e.sendKeyed(t, "POST", "/v1/threads", `{"title":"Plans","author":"ann"}`, "create-1")
	if create.status != http.StatusCreated || create.header.Get(replayedHeader) != "" {
		t.Fatalf("create: %d %s", create.status, create.body)
	}
	sameAnswer(t, create, e.sendKeyed(t, "POST", "/v1/threads", `{"title":"Plans","author":"ann"}`, "create-1"))
	var th struct{ ID string }
	create.decode(t, &th)
	threads, _, err := e.store.ListThreads(context.Background(), store.ListOptions{})
	if err != nil || len(threads) != 1 {
		t.Fatalf("threads after a replay: %d, %v", len(threads), err)
	}

	path := "/v1/threads/" + th.ID + "/messages"
	appended := e.sendKeyed(t, "POST", path, `{"author":"bob","body":{"text":"hi"}}`, `"append-1"`)
	if appended.status != http.StatusCreated {
		t.Fatalf("append: %d %s", appended.status, appended.body)
	}
	// The bare and the quoted form are one key.
	sameAnswer(t, appended, e.sendKeyed(t, "POST", path, `{"author":"bob","body":{"text":"hi"}}`, "append-1"))
	if n := messageCount(t, e.store, th.ID); n != 1 {
		t.Fatalf("%d messages after a replayed append, want 1", n)
	}

	// A thread answer is the thread as it was then, whatever came after.
	edit := e.sendKeyed(t, "PATCH", "/v1/threads/"+th.ID, `{"title":"Plans B"}`, "edit-1")
	if edit.status != http.StatusOK {
		t.Fatalf("edit: %d %s", edit.status, edit.body)
	}
	e.expect(t, "PATCH", "/v1/threads/"+th.ID, `{"title":"Plans C"}`, http.StatusOK)
	sameAnswer(t, edit, e.sendKeyed(t, "PATCH", "/v1/threads/"+th.ID, `{"title":"Plans B"}`, "edit-1"))
	var now struct{ Title string }
	e.expect(t, "GET", "/v1/threads/"+th.ID, "", http.StatusOK).decode(t, &now)
	if now.Title != "Plans C" {
		t.Fatalf("title %q after replaying an older edit, want the later one", now.Title)
	}

	var msg struct{ ID string }
	appended.decode(t, &msg)
	msgID := msg.ID

	// Another request with a used key changes nothing: 422.
	for _, c := range []struct{ method, path, body string }{
		{"POST", path, `{"author":"bob","body":{"text":"other"}}`},
		{"POST", "/v1/threads", `{"title":"Plans","author":"ann"}`},
		{"PATCH", "/v1/threads/" + th.ID, `{"title":"Plans D"}`},
		{"POST", "/v1/threads/" + th.ID + "/restore", ``},
		{"POST", path + "/" + msgID + "/restore", ``},
	} {
		r := e.sendKeyed(t, c.method, c.path, c.body, "append-1")
		if r.status != http.StatusUnprocessableEntity || r.errorCode(t) != CodeIdempotencyKeyReused {
			t.Fatalf("%s %s with a used key: %d %s, want 422 %s", c.method, c.path, r.status, r.body, CodeIdempotencyKeyReused)
		}
	}
	if n := messageCount(t, e.store, th.ID); n != 1 {
		t.Fatalf("%d messages after a refused reuse, want 1", n)
	}
	if threads, _, _ := e.store.ListThreads(context.Background(), store.ListOptions{}); len(threads) != 1 {
		t.Fatalf("%d threads after a refused reuse, want 1", len(threads))
	}
}

func TestIdempotencyKeyMalformedIs400(t *testing.T) {
	e := newEnv(t, Options{})
	for _, key := range []string{strings.Repeat("k", 256), "two words", `"open`, `"a\qb"`, `""`, "é"} {
		r := e.sendKeyed(t, "POST", "/v1/threads", `{"title":"x","author":"ann"}`, key)
		if r.status != http.StatusBadRequest || r.errorCode(t) != CodeInvalidIdempotencyKey {
			t.Fatalf("key %q: %d %s, want 400 %s", key, r.status, r.body, CodeInvalidIdempotencyKey)
		}
	}
	if threads, _, _ := e.store.ListThreads(context.Background(), store.ListOptions{}); len(threads) != 0 {
		t.Fatalf("%d threads created by refused requests", len(threads))
	}
	if r := e.sendKeyed(t, "POST", "/v1/threads", `{"title":"x","author":"ann"}`, strings.Repeat("k", 255)); r.status != http.StatusCreated {
		t.Fatalf("a 255-byte key: %d %s", r.status, r.body)
	}
}

// Eight sends of one key at once store one message, and all eight answer
// as the first.
func TestIdempotencyKeyConcurrentSendsStoreOnce(t *testing.T) {
	e := newEnv(t, Options{})
	e.expect(t, "POST", "/v1/threads", `{"id":"t","title":"x","author":"ann"}`, http.StatusCreated)
	answers := make([]response, 8)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = e.sendKeyed(t, "POST", "/v1/threads/t/messages", `{"author":"bob","body":"once"}`, "same")
		}()
	}
	wg.Wait()
	replays := 0
	for _, a := range answers {
		if a.status != http.StatusCreated || !bytes.Equal(a.body, answers[0].body) {
			t.Fatalf("answers differ: %d %s and %d %s", a.status, a.body, answers[0].status, answers[0].body)
		}
		if a.header.Get(replayedHeader) == "true" {
			replays++
		}
	}
	if n := messageCount(t, e.store, "t"); n != 1 || replays != 7 {
		t.Fatalf("%d messages and %d replays, want 1 and 7", n, replays)
	}
}

// A key is kept for the TTL by the store's clock; then the request runs
// again, and the expired key's records are dropped.
func TestIdempotencyKeyExpires(t *testing.T) {
	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st, err := store.Open(t.TempDir(), store.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, Options{Store: st, IdempotencyTTL: time.Hour})
	e.expect(t, "POST", "/v1/threads", `{"id":"t","title":"x","author":"ann"}`, http.StatusCreated)
	body := `{"author":"bob","body":"hi"}`
	first := e.sendKeyed(t, "POST", "/v1/threads/t/messages", body, "k1")
	clock.Advance(59 * time.Minute)
	sameAnswer(t, first, e.sendKeyed(t, "POST", "/v1/threads/t/messages", body, "k1"))

	clock.Advance(2 * time.Minute)
	again := e.sendKeyed(t, "POST", "/v1/threads/t/messages", body, "k1")
	if again.status != http.StatusCreated || again.header.Get(replayedHeader) != "" || bytes.Equal(again.body, first.body) {
		t.Fatalf("after the TTL: %d %s, want a new message", again.status, again.body)
	}
	if n := messageCount(t, e.store, "t"); n != 2 {
		t.Fatalf("%d messages, want 2", n)
	}
	// The expired record went when the new one came in.
	if n := idemKeys(t, st); n != 1 {
		t.Fatalf("%d key records, want 1 (the expired one dropped)", n)
	}
}

// Keys are durable: a server started again on the database replays them.
func TestIdempotencyKeySurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	serve := func() (*testEnv, func()) {
		st, err := store.Open(dir, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		h, err := New(Options{Store: st, Registry: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		env := &testEnv{srv: httptest.NewServer(h), store: st}
		return env, func() {
			env.srv.Close()
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	e, stop := serve()
	e.expect(t, "POST", "/v1/threads", `{"id":"t","title":"x","author":"ann"}`, http.StatusCreated)
	first := e.sendKeyed(t, "POST", "/v1/threads/t/messages", `{"author":"bob","body":"hi"}`, "k1")
	stop()

	e, stop = serve()
	defer stop()
	sameAnswer(t, first, e.sendKeyed(t, "POST", "/v1/threads/t/messages", `{"author":"bob","body":"hi"}`, "k1"))
	if n := messageCount(t, e.store, "t"); n != 1 {
		t.Fatalf("%d messages after a replay across a restart, want 1", n)
	}
}

// A caller keeps at most IdempotencyKeys keys: the oldest are dropped.
func TestIdempotencyKeysBoundedPerCaller(t *testing.T) {
	e := newEnv(t, Options{IdempotencyKeys: 4})
	e.expect(t, "POST", "/v1/threads", `{"id":"t","title":"x","author":"ann"}`, http.StatusCreated)
	keys := []string{"k1", "k2", "k3", "k4", "k5"}
	for _, k := range keys {
		if r := e.sendKeyed(t, "POST", "/v1/threads/t/messages", `{"author":"bob","body":"hi"}`, k); r.status != http.StatusCreated {
			t.Fatalf("%s: %d %s", k, r.status, r.body)
		}
	}
	if n := idemKeys(t, e.store); n != 4 {
		t.Fatalf("%d keys kept, want 4", n)
	}
	if r := e.sendKeyed(t, "POST", "/v1/threads/t/messages", `{"author":"bob","body":"hi"}`, "k5"); r.header.Get(replayedHeader) != "true" {
		t.Fatalf("the newest key is not kept: %d %s", r.status, r.body)
	}
	if r := e.sendKeyed(t, "POST", "/v1/threads/t/messages", `{"author":"bob","body":"hi"}`, "k1"); r.header.Get(replayedHeader) != "" {
		t.Fatalf("the oldest key is still kept: %d %s", r.status, r.body)
	}
	if n := messageCount(t, e.store, "t"); n != 6 {
		t.Fatalf("%d messages, want 6 (five keys and the dropped one again)", n)
	}
}

// A second send of a key being served waits for the first, and answers
// 409 idempotency_key_in_flight once its wait is over.
func TestIdempotencyKeyInFlightWaitsThenRefuses(t *testing.T) {
	var f inFlight
	release, err := f.acquire(context.Background(), "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.acquire(context.Background(), "k", 10*time.Millisecond); err != errKeyInFlight {
		t.Fatalf("a held key: %v, want errKeyInFlight", err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := f.acquire(context.Background(), "k", time.Minute)
		if err == nil {
			r()
		}
		got <- err
	}()
	release()
	if err := <-got; err != nil {
		t.Fatalf("a waiter after release: %v", err)
	}
	status, body := classify(errKeyInFlight)
	if status != http.StatusConflict || body.Code != CodeIdempotencyKeyInFlight {
		t.Fatalf("in flight answers %d %s", status, body.Code)
	}
}
