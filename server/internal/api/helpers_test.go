package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// testEnv is a real store in a temporary directory behind a real loopback
// HTTP server.
type testEnv struct {
	srv    *httptest.Server
	store  *store.Store
	reg    *prometheus.Registry
	bearer string // sent as "Authorization: Bearer <bearer>" when set
	// seen, when set, records the operations the env's answers exercised
	// (conformance_test.go checks every answer either way).
	seen *exercised
}

// newEnv serves opts over a fresh store, or over opts.Store when set; the
// store is closed when the test ends.
func newEnv(t *testing.T, opts Options) *testEnv {
	t.Helper()
	st := opts.Store
	if st == nil {
		var err error
		if st, err = store.Open(t.TempDir(), store.Options{}); err != nil {
			t.Fatalf("open store: %v", err)
		}
	}
	opts.Store = st
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	h, err := New(opts)
	if err != nil {
		st.Close()
		t.Fatalf("New: %v", err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		answered.collect(t, opts.Registry) // for the OpenAPI status check (openapi_test.go)
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return &testEnv{srv: srv, store: st, reg: opts.Registry}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// send makes one request; auth is the whole Authorization header ("" = none).
// The answer is checked against api/openapi.yaml (checkAnswer).
func (e *testEnv) send(t *testing.T, method, path, body, auth string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	r := response{status: res.StatusCode, header: res.Header, body: b}
	checkAnswer(t, e.seen, req, []byte(body), r)
	return r
}

// expect sends with the env's bearer and checks the status.
func (e *testEnv) expect(t *testing.T, method, path, body string, want int) response {
	t.Helper()
	auth := ""
	if e.bearer != "" {
		auth = "Bearer " + e.bearer
	}
	r := e.send(t, method, path, body, auth)
	if r.status != want {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, path, r.status, want, r.body)
	}
	return r
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// errorText checks the response is a JSON error and returns its message.
func (r response) errorText(t *testing.T) string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error Content-Type %q, want application/json; body %s", ct, r.body)
	}
	var body struct {
		Error string `json:"error"`
	}
	r.decode(t, &body)
	if body.Error == "" {
		t.Fatalf("error body without message: %s", r.body)
	}
	return body.Error
}

// errorCode checks the response is a JSON error and returns its code.
func (r response) errorCode(t *testing.T) Code {
	t.Helper()
	r.errorText(t)
	var body struct {
		Code Code `json:"code"`
	}
	r.decode(t, &body)
	return body.Code
}

func (e *testEnv) createThread(t *testing.T, id string) wire.Thread {
	t.Helper()
	var th wire.Thread
	e.expect(t, "POST", "/v1/threads", `{"id":"`+id+`","title":"a title","author":"ann"}`, http.StatusCreated).decode(t, &th)
	return th
}

func (e *testEnv) appendMessage(t *testing.T, tid, mid, body string) wire.Message {
	t.Helper()
	var m wire.Message
	e.expect(t, "POST", "/v1/threads/"+tid+"/messages", `{"id":"`+mid+`","author":"bob","body":`+body+`}`, http.StatusCreated).decode(t, &m)
	return m
}

// syncBuffer collects log output written from server goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// messageList is the answer to GET /v1/threads/{tid}/messages (written by
// hand in listMessages).
type messageList struct {
	Messages   []wire.Message `json:"messages"`
	NextCursor string         `json:"next_cursor"`
}
