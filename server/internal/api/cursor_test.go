package api

import (
	"net/http"
	"net/url"
	"testing"
)

// pageOf is the part of any listing's answer a pager reads.
type pageOf struct {
	Threads    []struct{ ID string } `json:"threads"`
	Messages   []struct{ ID string } `json:"messages"`
	Versions   []struct{ ID string } `json:"versions"`
	NextCursor string                `json:"next_cursor"`
}

func (p pageOf) len() int { return len(p.Threads) + len(p.Messages) + len(p.Versions) }

// A cursor the server did not hand out is refused with 400 invalid_cursor
// on every paginated route, never answered with an empty page (which a
// client would take for the end); the cursors it hands out keep working,
// an old one past the end giving an empty last page.
func TestCursorsTheServerDidNotIssueAreRefused(t *testing.T) {
	e := newEnv(t, Options{})
	for _, id := range []string{"t1", "t2", "t3"} {
		e.createThread(t, id)
	}
	e.appendMessage(t, "t1", "m1", `"a"`)
	e.appendMessage(t, "t1", "m2", `"b"`)
	e.appendMessage(t, "t1", "m3", `"c"`)
	e.appendMessage(t, "t2", "n1", `"d"`)
	e.appendMessage(t, "t2", "n2", `"e"`)
	for range 3 {
		e.expect(t, "PUT", "/v1/threads/t1/messages/m1", `{"body":"again"}`, http.StatusOK)
		e.expect(t, "PUT", "/v1/threads/t1/messages/m2", `{"body":"again"}`, http.StatusOK)
	}
	listings := map[string]string{
		"threads":        "/v1/threads",
		"messages":       "/v1/threads/t1/messages",
		"versions":       "/v1/threads/t1/messages/m1/versions",
		"other messages": "/v1/threads/t2/messages",
		"other versions": "/v1/threads/t1/messages/m2/versions",
	}
	issued := make(map[string]string)
	for name, path := range listings {
		var p pageOf
		e.expect(t, "GET", path+"?limit=1", "", http.StatusOK).decode(t, &p)
		if p.NextCursor == "" || p.len() != 1 {
			t.Fatalf("%s: first page of one: %+v", name, p)
		}
		issued[name] = p.NextCursor
		// The cursor handed out works.
		e.expect(t, "GET", path+"?limit=1&cursor="+url.QueryEscape(p.NextCursor), "", http.StatusOK).decode(t, &p)
		if p.len() != 1 {
			t.Fatalf("%s: second page: %+v", name, p)
		}
	}
	for _, name := range []string{"threads", "messages", "versions"} {
		path := listings[name]
		c := issued[name]
		bad := []string{"zzz", "t1", "m1", "1", "00000000000000000001:m1", c[:len(c)-1], c + "A", "_" + c[1:]}
		for other, oc := range issued {
			if other != name {
				bad = append(bad, oc) // another listing's cursor
			}
		}
		for _, cur := range bad {
			r := e.expect(t, "GET", path+"?cursor="+url.QueryEscape(cur), "", http.StatusBadRequest)
			if code := r.errorCode(t); code != "invalid_cursor" {
				t.Errorf("%s with cursor %q: code %q, want invalid_cursor", name, cur, code)
			}
		}
	}

	// Old cursors past the end: the items after them are gone from the
	// listing; the page is empty and the last.
	e.expect(t, "DELETE", "/v1/threads/t2", "", http.StatusNoContent)
	e.expect(t, "DELETE", "/v1/threads/t3", "", http.StatusNoContent)
	e.expect(t, "DELETE", "/v1/threads/t1/messages/m2", "", http.StatusNoContent)
	e.expect(t, "DELETE", "/v1/threads/t1/messages/m3", "", http.StatusNoContent)
	for _, name := range []string{"threads", "messages"} {
		var p pageOf
		e.expect(t, "GET", listings[name]+"?cursor="+url.QueryEscape(issued[name]), "", http.StatusOK).decode(t, &p)
		if p.len() != 0 || p.NextCursor != "" {
			t.Errorf("%s: an old cursor past the end: %+v, want an empty last page", name, p)
		}
	}
}
