package api

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// Titles, authors and bodies never reach the log; IDs do.
func TestLogsHoldNoContent(t *testing.T) {
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, Options{Logger: logger, AdminToken: "adm"})

	const (
		title  = "PLANTED-TITLE-7f3a"
		author = "PLANTED-AUTHOR-91bc"
		body   = "PLANTED-BODY-c0de"
		edit   = "PLANTED-EDIT-5e11"
	)
	e.expect(t, "POST", "/v1/threads", `{"id":"logthread","title":"`+title+`","author":"`+author+`"}`, http.StatusCreated)
	e.expect(t, "POST", "/v1/threads/logthread/messages", `{"id":"logmsg","author":"`+author+`","body":{"text":"`+body+`"}}`, http.StatusCreated)
	e.expect(t, "PUT", "/v1/threads/logthread/messages/logmsg", `{"body":"`+edit+`"}`, http.StatusOK)
	e.expect(t, "GET", "/v1/threads/logthread", "", http.StatusOK)
	e.expect(t, "GET", "/v1/threads/logthread/messages", "", http.StatusOK)
	e.expect(t, "GET", "/v1/threads/logthread/messages/logmsg/versions", "", http.StatusOK)
	e.expect(t, "DELETE", "/v1/threads/logthread/messages/logmsg", "", http.StatusNoContent)
	e.expect(t, "POST", "/v1/threads/logthread/messages/logmsg/restore", "", http.StatusOK)
	e.send(t, "PUT", "/admin/threads/logthread/legal_hold", `{"legal_hold":true}`, "Bearer adm")
	// Rejected requests carrying content.
	e.expect(t, "POST", "/v1/threads", `{"title":"`+title+`","author":"`+author+`","x":1}`, http.StatusBadRequest)
	e.expect(t, "POST", "/v1/threads", `{"title":"`+title+`",`, http.StatusBadRequest)
	e.expect(t, "POST", "/v1/threads/logthread/messages", `{"author":"`+author+`","body":"`+body+`"} "`+body+`"`, http.StatusBadRequest)

	// A record the store cannot decode: 500 with a generic message, the
	// detail logged, still without content.
	b := e.store.NewBulk()
	if err := b.PutRaw([]byte("thread:badthread:meta"), []byte(`{"id":"badthread","title":"`+title+`","author":`)); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if msg := e.expect(t, "GET", "/v1/threads/badthread", "", http.StatusInternalServerError).errorText(t); msg != "internal error" {
		t.Fatalf("500 message %q", msg)
	}

	out := logs.String()
	for _, want := range []string{`"msg":"http_request"`, `"tid":"logthread"`, `"mid":"logmsg"`, `"msg":"http_internal_error"`, `"tid":"badthread"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s", want)
		}
	}
	for _, planted := range []string{title, author, body, edit} {
		if strings.Contains(out, planted) {
			t.Errorf("log contains planted content %q:\n%s", planted, out)
		}
	}
}

func readAll(t *testing.T, res *http.Response) []byte {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
