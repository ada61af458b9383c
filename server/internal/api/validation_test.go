package api

import (
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestInvalidIDs(t *testing.T) {
	e := newEnv(t, Options{})
	e.createThread(t, "t1")
	e.appendMessage(t, "t1", "m1", `1`)

	// Path segments as a client would escape them.
	bad := map[string]string{
		"colon":      "a:b",
		"slash":      "a%2Fb",
		"space":      "a%20b",
		"non-ASCII":  "th%C3%A9",
		"129 chars":  strings.Repeat("a", 129),
		"leading -":  "-abc",
		"leading .":  ".abc",
		"percent":    "a%25b",
		"dot-dot":    "..x",
		"empty-like": "%20",
	}
	for name, id := range bad {
		t.Run(name, func(t *testing.T) {
			for _, c := range []struct{ method, path, body string }{
				{"GET", "/v1/threads/" + id, ""},
				{"DELETE", "/v1/threads/" + id, ""},
				{"POST", "/v1/threads/" + id + "/restore", ""},
				{"GET", "/v1/threads/" + id + "/messages", ""},
				{"POST", "/v1/threads/" + id + "/messages", `{"author":"a","body":1}`},
				{"GET", "/v1/threads/t1/messages/" + id, ""},
				{"PUT", "/v1/threads/t1/messages/" + id, `{"body":1}`},
				{"DELETE", "/v1/threads/t1/messages/" + id, ""},
				{"GET", "/v1/threads/t1/messages/" + id + "/versions", ""},
				{"POST", "/v1/threads/t1/messages/" + id + "/restore", ""},
			} {
				msg := e.expect(t, c.method, c.path, c.body, http.StatusBadRequest).errorText(t)
				if !strings.Contains(msg, idRule) {
					t.Errorf("%s %s: error %q does not name the rule %s", c.method, c.path, msg, idRule)
				}
			}
		})
	}

	// IDs in bodies follow the same rule.
	for _, id := range []string{"a:b", "a/b", "a b", "thé", strings.Repeat("a", 129)} {
		msg := e.expect(t, "POST", "/v1/threads", `{"id":"`+id+`","title":"x","author":"y"}`, http.StatusBadRequest).errorText(t)
		if !strings.Contains(msg, idRule) {
			t.Errorf("thread id %q: error %q does not name the rule", id, msg)
		}
		msg = e.expect(t, "POST", "/v1/threads/t1/messages", `{"id":"`+id+`","author":"y","body":1}`, http.StatusBadRequest).errorText(t)
		if !strings.Contains(msg, idRule) {
			t.Errorf("message id %q: error %q does not name the rule", id, msg)
		}
	}

	// The longest valid ID is accepted.
	long := strings.Repeat("b", 128)
	e.createThread(t, long)
	e.expect(t, "GET", "/v1/threads/"+long, "", http.StatusOK)
}

// idRule is the ID pattern of spec §2, which every rejection names.
const idRule = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"

func TestRequestBodies(t *testing.T) {
	e := newEnv(t, Options{MaxBodyBytes: 256, AdminToken: "adm"})
	e.bearer = "adm" // /v1 is open; /admin takes the token
	e.createThread(t, "t1")

	cases := []struct {
		name, method, path, body string
		status                   int
		contains                 string
	}{
		{"malformed", "POST", "/v1/threads", `{"title":"x",`, 400, "invalid JSON"},
		{"not JSON", "POST", "/v1/threads", `title=x`, 400, "invalid JSON"},
		{"unknown field", "POST", "/v1/threads", `{"title":"x","author":"y","color":"red"}`, 400, `"color"`},
		{"legal hold is not public", "POST", "/v1/threads", `{"title":"x","author":"y","legal_hold":true}`, 400, `"legal_hold"`},
		{"two values", "POST", "/v1/threads", `{"title":"x","author":"y"} {"title":"z","author":"y"}`, 400, "single JSON value"},
		{"trailing garbage", "POST", "/v1/threads", `{"title":"x","author":"y"} x`, 400, "invalid JSON"},
		{"empty", "POST", "/v1/threads", ``, 400, "request body is required"},
		{"wrong type", "POST", "/v1/threads", `{"title":5,"author":"y"}`, 400, `"title"`},
		{"array", "POST", "/v1/threads", `[]`, 400, "invalid JSON"},
		{"missing title", "POST", "/v1/threads", `{"author":"y"}`, 400, "title is required"},
		{"missing author", "POST", "/v1/threads", `{"title":"x"}`, 400, "author is required"},
		{"oversized", "POST", "/v1/threads", `{"title":"` + strings.Repeat("x", 300) + `","author":"y"}`, 413, "request body too large"},
		{"oversized after a value", "POST", "/v1/threads", `{"title":"x","author":"y"}` + strings.Repeat(" ", 300), 413, "request body too large"},
		{"message without body", "POST", "/v1/threads/t1/messages", `{"author":"y"}`, 400, "body is required"},
		{"message without author", "POST", "/v1/threads/t1/messages", `{"body":1}`, 400, "author is required"},
		{"message unknown field", "POST", "/v1/threads/t1/messages", `{"author":"y","body":1,"ts":5}`, 400, `"ts"`},
		{"message oversized", "POST", "/v1/threads/t1/messages", `{"author":"y","body":"` + strings.Repeat("x", 300) + `"}`, 413, "request body too large"},
		{"message body beyond 2^53", "POST", "/v1/threads/t1/messages", `{"author":"y","body":{"n":[9007199254740993]}}`, 400, "body: not I-JSON (RFC 7493): /n/0: the number 9007199254740993 is beyond ±(2^53−1)"},
		{"message body repeats a name", "POST", "/v1/threads/t1/messages", `{"author":"y","body":{"a":1,"a":2}}`, 400, `body: not I-JSON (RFC 7493): the value: the name "a" is repeated`},
		{"edit body beyond 2^53", "PUT", "/v1/threads/t1/messages/m1", `{"body":-1e300}`, 400, "the number -1e300 is beyond"},
		{"edit without body", "PUT", "/v1/threads/t1/messages/m1", `{}`, 400, "body is required"},
		{"edit with author", "PUT", "/v1/threads/t1/messages/m1", `{"body":1,"author":"z"}`, 400, `"author"`},
		{"edit oversized", "PUT", "/v1/threads/t1/messages/m1", `{"body":"` + strings.Repeat("x", 300) + `"}`, 413, "request body too large"},
		{"legal hold oversized", "PUT", "/admin/threads/t1/legal_hold", `{"legal_hold":true}` + strings.Repeat(" ", 300), 413, "request body too large"},
		{"wrong method", "PUT", "/v1/threads/t1", ``, 405, "not allowed"},
		{"unknown route", "GET", "/v2/threads", ``, 404, "no such route"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg := e.expect(t, c.method, c.path, c.body, c.status).errorText(t)
			if !strings.Contains(msg, c.contains) {
				t.Errorf("error %q does not contain %q", msg, c.contains)
			}
		})
	}

	r := e.expect(t, "DELETE", "/v1/threads", "", http.StatusMethodNotAllowed)
	if allow := r.header.Get("Allow"); allow != "POST, GET" {
		t.Errorf("Allow %q", allow)
	}
	// A message body may be any JSON value, null included.
	e.expect(t, "POST", "/v1/threads/t1/messages", `{"author":"y","body":null}`, http.StatusCreated)
}

func TestHealthz(t *testing.T) {
	e := newEnv(t, Options{APIKey: "k"})
	r := e.expect(t, "GET", "/healthz", "", http.StatusOK)
	if string(r.body) != "{\"status\":\"ok\"}\n" || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("healthz %q %q", r.header.Get("Content-Type"), r.body)
	}
}

// Invalid UTF-8 anywhere in a body is refused before anything is stored:
// stored, it breaks every listing of the thread for strict JSON clients.
// Titles and authors have limits of their own.
func TestInvalidUTF8AndTextLimits(t *testing.T) {
	e := newEnv(t, Options{})
	e.createThread(t, "t1")
	e.appendMessage(t, "t1", "m1", `"hello"`)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/threads", "{\"id\":\"t2\",\"title\":\"bad \xff title\",\"author\":\"ann\"}"},
		{"POST", "/v1/threads", "{\"id\":\"t2\",\"title\":\"title\",\"author\":\"bad \xc3\"}"},
		{"POST", "/v1/threads/t1/messages", "{\"id\":\"m2\",\"author\":\"ann\",\"body\":\"bad \xfe\xff\"}"},
		{"POST", "/v1/threads/t1/messages", "{\"id\":\"m2\",\"author\":\"b\xe2\x82\",\"body\":1}"},
		{"POST", "/v1/threads/t1/messages", "{\"id\":\"m2\",\"author\":\"ann\",\"body\":{\"k\xff\":1}}"},
		{"PUT", "/v1/threads/t1/messages/m1", "{\"body\":\"bad \xc0\xaf\"}"},
	} {
		msg := e.expect(t, c.method, c.path, c.body, http.StatusBadRequest).errorText(t)
		if !strings.Contains(msg, "UTF-8") {
			t.Errorf("%s %s %q: error %q does not say UTF-8", c.method, c.path, c.body, msg)
		}
	}
	e.expect(t, "GET", "/v1/threads/t2", "", http.StatusNotFound)
	e.expect(t, "GET", "/v1/threads/t1/messages/m2", "", http.StatusNotFound)
	r := e.expect(t, "GET", "/v1/threads/t1/messages/m1/versions", "", http.StatusOK)
	if !utf8.Valid(r.body) {
		t.Fatalf("versions listing is not UTF-8: %q", r.body)
	}

	// Valid non-ASCII text is fine, up to the limits.
	e.expect(t, "POST", "/v1/threads", `{"id":"t3","title":"`+strings.Repeat("é", maxTitleBytes/2)+`","author":"`+strings.Repeat("ü", maxAuthorBytes/2)+`"}`, http.StatusCreated)
	for _, c := range []struct{ path, body, field string }{
		{"/v1/threads", `{"id":"t4","title":"` + strings.Repeat("a", maxTitleBytes+1) + `","author":"ann"}`, "title"},
		{"/v1/threads", `{"id":"t4","title":"x","author":"` + strings.Repeat("a", maxAuthorBytes+1) + `"}`, "author"},
		{"/v1/threads/t1/messages", `{"id":"m4","author":"` + strings.Repeat("é", maxAuthorBytes/2+1) + `","body":1}`, "author"},
	} {
		msg := e.expect(t, "POST", c.path, c.body, http.StatusBadRequest).errorText(t)
		if !strings.Contains(msg, c.field) || !strings.Contains(msg, "limit") {
			t.Errorf("%s: error %q does not name the field and its limit", c.body[:30], msg)
		}
	}
}
