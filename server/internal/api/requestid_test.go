package api

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// logLines decodes JSON log lines.
func logLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	return lines
}

// Every answer carries X-Request-ID: the client's when sane, a generated
// one otherwise; and every log line about the request (the access line,
// errors, what handlers log) carries it as request_id.
func TestRequestIDInAnswersAndLogLines(t *testing.T) {
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, Options{Logger: logger, AdminToken: "adm"})
	e.createThread(t, "t1")

	do := func(method, path, body, id string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if id != "" {
			req.Header.Set(RequestIDHeader, id)
		}
		req.Header.Set("Authorization", "Bearer adm")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, res)
		return res
	}

	// Sane IDs are kept: a UUID, a trace header, a base64 token.
	for _, id := range []string{"0f8fad5b-d9cb-469f-a165-70867728950e", "Root=1-67891233-abcdef012345678912345678", "aGVsbG8+d29ybGQ/Pz8=", "x"} {
		if got := do("GET", "/v1/threads/t1", "", id).Header.Get(RequestIDHeader); got != id {
			t.Errorf("sent %q, answered %q", id, got)
		}
	}
	// Anything else is replaced, never echoed or logged.
	generated := map[string]bool{}
	for _, bad := range []string{"", "has space", `quote"d`, "semi;colon", "caf\u00e9", strings.Repeat("a", 129), "\"msg\":\"forged\""} {
		got := do("GET", "/v1/threads/t1", "", bad).Header.Get(RequestIDHeader)
		if got == bad || !saneRequestID(got) || len(got) != 26 || generated[got] {
			t.Errorf("sent %q, answered %q: want a new generated ID", bad, got)
		}
		generated[got] = true
	}

	// An error answer and a handler's own line carry the ID too.
	if res := do("GET", "/v1/threads/nope", "", "req-404"); res.StatusCode != http.StatusNotFound || res.Header.Get(RequestIDHeader) != "req-404" {
		t.Fatalf("404: %d %q", res.StatusCode, res.Header.Get(RequestIDHeader))
	}
	do("PUT", "/admin/threads/t1/legal_hold", `{"legal_hold":true}`, "req-hold")
	do("POST", "/v1/threads", `{"title":`, "req-400")
	b := e.store.NewBulk()
	if err := b.PutRaw([]byte("thread:bad:meta"), []byte(`{"id":`)); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	do("GET", "/v1/threads/bad", "", "req-500")

	byID := map[string][]string{}
	for _, l := range logLines(t, logs.String()) {
		id, _ := l["request_id"].(string)
		msg, _ := l["msg"].(string)
		if msg == "http_request" && id == "" {
			t.Errorf("access line without request_id: %v", l)
		}
		byID[id] = append(byID[id], msg)
	}
	for id, want := range map[string][]string{
		"req-404":  {"http_request"},
		"req-hold": {"legal_hold_set", "http_request"},
		"req-400":  {"http_request"},
		"req-500":  {"http_internal_error", "http_request"},
	} {
		if got := strings.Join(byID[id], ","); !strings.Contains(got, strings.Join(want, ",")) {
			t.Errorf("lines of %s: %q, want %q", id, got, want)
		}
	}
	if strings.Contains(logs.String(), "forged") || strings.Contains(logs.String(), "has space") {
		t.Errorf("a refused ID reached the log:\n%s", logs.String())
	}
}
