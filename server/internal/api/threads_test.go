package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/store"
)

func TestThreadLifecycle(t *testing.T) {
	e := newEnv(t, Options{})

	r := e.expect(t, "POST", "/v1/threads", `{"id":"t1","title":"Plans","author":"ann"}`, http.StatusCreated)
	var th wire.Thread
	r.decode(t, &th)
	if th.ID != "t1" || th.Title != "Plans" || th.Author != "ann" || th.CreatedTS.IsZero() || th.Deleted || th.LegalHold {
		t.Fatalf("created thread %+v", th)
	}
	if loc := r.header.Get("Location"); loc != "/v1/threads/t1" {
		t.Errorf("Location %q", loc)
	}
	e.expect(t, "POST", "/v1/threads", `{"id":"t1","title":"again","author":"ann"}`, http.StatusConflict)

	var got wire.Thread
	e.expect(t, "GET", "/v1/threads/t1", "", http.StatusOK).decode(t, &got)
	if got != th {
		t.Fatalf("get %+v, want %+v", got, th)
	}
	if msg := e.expect(t, "GET", "/v1/threads/nope", "", http.StatusNotFound).errorText(t); msg == "" {
		t.Fatal("404 without message")
	}

	// Soft delete hides the thread unless include_deleted=true.
	if r := e.expect(t, "DELETE", "/v1/threads/t1", "", http.StatusNoContent); len(r.body) != 0 {
		t.Errorf("204 with body %q", r.body)
	}
	e.expect(t, "GET", "/v1/threads/t1", "", http.StatusNotFound).errorText(t)
	e.expect(t, "GET", "/v1/threads/t1?include_deleted=false", "", http.StatusNotFound)
	e.expect(t, "GET", "/v1/threads/t1?include_deleted=yes-please", "", http.StatusBadRequest)
	var deleted wire.Thread
	e.expect(t, "GET", "/v1/threads/t1?include_deleted=true", "", http.StatusOK).decode(t, &deleted)
	if !deleted.Deleted || deleted.DeletedTS.IsZero() {
		t.Fatalf("deleted thread %+v", deleted)
	}
	var list threadList
	e.expect(t, "GET", "/v1/threads", "", http.StatusOK).decode(t, &list)
	if len(list.Threads) != 0 {
		t.Fatalf("live list holds a deleted thread: %+v", list.Threads)
	}

	var restored wire.Thread
	e.expect(t, "POST", "/v1/threads/t1/restore", "", http.StatusOK).decode(t, &restored)
	if restored.Deleted {
		t.Fatalf("restored thread %+v", restored)
	}
	e.expect(t, "GET", "/v1/threads/t1", "", http.StatusOK)

	e.expect(t, "DELETE", "/v1/threads/nope", "", http.StatusNotFound)
	e.expect(t, "POST", "/v1/threads/nope/restore", "", http.StatusNotFound)
}

func TestCreateThreadGeneratesID(t *testing.T) {
	e := newEnv(t, Options{})
	var th wire.Thread
	e.expect(t, "POST", "/v1/threads", `{"title":"x","author":"ann"}`, http.StatusCreated).decode(t, &th)
	if err := store.ValidateID(th.ID); err != nil {
		t.Fatalf("generated ID %q: %v", th.ID, err)
	}
	e.expect(t, "GET", "/v1/threads/"+th.ID, "", http.StatusOK)
}

func TestListThreadsPagination(t *testing.T) {
	e := newEnv(t, Options{})
	want := []string{"p1", "p2", "p3", "p4", "p5"}
	for _, id := range want {
		e.createThread(t, id)
	}

	var got []string
	cursor := ""
	for page := 0; ; page++ {
		if page > len(want) {
			t.Fatalf("pagination does not end; got %v", got)
		}
		var list threadList
		e.expect(t, "GET", "/v1/threads?limit=2&cursor="+cursor, "", http.StatusOK).decode(t, &list)
		if len(list.Threads) > 2 {
			t.Fatalf("page of %d threads with limit=2", len(list.Threads))
		}
		for _, th := range list.Threads {
			got = append(got, th.ID)
		}
		if list.NextCursor == "" {
			break
		}
		cursor = list.NextCursor
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("paged IDs %v, want %v", got, want)
	}

	for _, bad := range []string{"0", "1001", "-1", "ten", "1.5"} {
		msg := e.expect(t, "GET", "/v1/threads?limit="+bad, "", http.StatusBadRequest).errorText(t)
		if msg != "limit must be an integer from 1 to 1000" {
			t.Errorf("limit=%s: %q", bad, msg)
		}
	}
	e.expect(t, "GET", "/v1/threads?limit=1000", "", http.StatusOK)

	// An empty database lists [] rather than null.
	empty := newEnv(t, Options{})
	r := empty.expect(t, "GET", "/v1/threads", "", http.StatusOK)
	if string(r.body) != "{\"threads\":[],\"next_cursor\":\"\"}\n" {
		t.Fatalf("empty list %s", r.body)
	}
}

func TestRestoreThreadWhilePurging(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	e.createThread(t, "t1")
	e.appendMessage(t, "t1", "m1", `"hello"`)
	e.expect(t, "DELETE", "/v1/threads/t1", "", http.StatusNoContent)

	th, err := e.store.GetThread(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	marker := store.PurgeMarker{
		Kind: store.KindThread, ID: "t1", ThreadID: "t1", DeletedTS: th.DeletedTS,
		RunID: "run1", StartedAt: time.Now().UnixNano(),
	}
	if err := e.store.BeginPurge(ctx, marker); err != nil {
		t.Fatalf("begin purge: %v", err)
	}
	e.expect(t, "POST", "/v1/threads/t1/restore", "", http.StatusConflict).errorText(t)

	if _, err := e.store.PurgeThread(ctx, "t1", store.PurgeOptions{BatchSize: 2}); err != nil {
		t.Fatalf("purge: %v", err)
	}
	// A run clears the marker once the item's audit record is durable.
	if err := e.store.ClearPurges(ctx, []store.PurgeMarker{marker}); err != nil {
		t.Fatalf("clear purge marker: %v", err)
	}
	e.expect(t, "POST", "/v1/threads/t1/restore", "", http.StatusNotFound)
	e.expect(t, "GET", "/v1/threads/t1?include_deleted=true", "", http.StatusNotFound)
	e.expect(t, "GET", "/v1/threads/t1/messages/m1/versions?include_deleted=true", "", http.StatusNotFound)
}

func TestLegalHold(t *testing.T) {
	e := newEnv(t, Options{AdminToken: "adm"})
	e.createThread(t, "t1")
	e.bearer = "adm"

	var th wire.Thread
	e.expect(t, "PUT", "/admin/threads/t1/legal_hold", `{"legal_hold":true}`, http.StatusOK).decode(t, &th)
	if !th.LegalHold {
		t.Fatalf("hold not set: %+v", th)
	}
	e.bearer = ""
	e.expect(t, "GET", "/v1/threads/t1", "", http.StatusOK).decode(t, &th)
	if !th.LegalHold {
		t.Fatalf("hold not stored: %+v", th)
	}
	e.bearer = "adm"
	e.expect(t, "PUT", "/admin/threads/t1/legal_hold", `{"legal_hold":false}`, http.StatusOK).decode(t, &th)
	if th.LegalHold {
		t.Fatalf("hold not cleared: %+v", th)
	}

	e.expect(t, "PUT", "/admin/threads/t1/legal_hold", `{}`, http.StatusBadRequest)
	e.expect(t, "PUT", "/admin/threads/t1/legal_hold", `{"legal_hold":"yes"}`, http.StatusBadRequest)
	e.expect(t, "PUT", "/admin/threads/nope/legal_hold", `{"legal_hold":true}`, http.StatusNotFound)
	e.expect(t, "PUT", "/admin/threads/a:b/legal_hold", `{"legal_hold":true}`, http.StatusBadRequest)

	e.bearer = ""
	e.expect(t, "PUT", "/admin/threads/t1/legal_hold", `{"legal_hold":true}`, http.StatusUnauthorized)
}

// The admin view of a thread shows it deleted too (with its hold), and
// the hold list names held threads, deleted or not.
func TestAdminThreadAndLegalHolds(t *testing.T) {
	e := newEnv(t, Options{AdminToken: "adm"})
	for _, id := range []string{"t1", "t2", "t3"} {
		e.createThread(t, id)
	}
	e.expect(t, "DELETE", "/v1/threads/t2", "", http.StatusNoContent)
	e.bearer = "adm"
	e.expect(t, "PUT", "/admin/threads/t2/legal_hold", `{"legal_hold":true}`, http.StatusOK)
	e.expect(t, "PUT", "/admin/threads/t3/legal_hold", `{"legal_hold":true}`, http.StatusOK)

	var th wire.Thread
	e.expect(t, "GET", "/admin/threads/t2", "", http.StatusOK).decode(t, &th)
	if th.ID != "t2" || !th.Deleted || !th.LegalHold {
		t.Fatalf("admin thread: %+v", th)
	}
	var held struct {
		Threads []wire.Thread `json:"threads"`
	}
	e.expect(t, "GET", "/admin/legal_holds", "", http.StatusOK).decode(t, &held)
	if len(held.Threads) != 2 || held.Threads[0].ID != "t2" || held.Threads[1].ID != "t3" {
		t.Fatalf("legal holds: %+v", held)
	}
	e.expect(t, "GET", "/admin/threads/nope", "", http.StatusNotFound)
	e.expect(t, "GET", "/admin/threads/a:b", "", http.StatusBadRequest)

	e.bearer = ""
	e.expect(t, "GET", "/admin/threads/t1", "", http.StatusUnauthorized)
	e.expect(t, "GET", "/admin/legal_holds", "", http.StatusUnauthorized)

	off := newEnv(t, Options{})
	off.expect(t, "GET", "/admin/threads/t1", "", http.StatusForbidden)
	off.expect(t, "GET", "/admin/legal_holds", "", http.StatusForbidden)
}

// PATCH /v1/threads/{tid} changes a live thread's title, checked as at
// creation, with the other thread routes' 404 for a soft-deleted or
// unknown thread, and 409 legal_hold while the thread is held.
func TestEditThreadTitle(t *testing.T) {
	e := newEnv(t, Options{AdminToken: "adm"})
	before := e.createThread(t, "t1")

	var th wire.Thread
	e.expect(t, "PATCH", "/v1/threads/t1", `{"title":"Renamed"}`, http.StatusOK).decode(t, &th)
	if th.Title != "Renamed" || th.ID != "t1" || th.Author != before.Author || !th.CreatedTS.Equal(before.CreatedTS.Time) ||
		!th.UpdatedTS.After(before.UpdatedTS.Time) {
		t.Fatalf("after PATCH: %+v (before %+v)", th, before)
	}
	var got wire.Thread
	e.expect(t, "GET", "/v1/threads/t1", "", http.StatusOK).decode(t, &got)
	if got != th {
		t.Fatalf("GET after PATCH: %+v, want %+v", got, th)
	}
	// The same title again writes nothing.
	var again wire.Thread
	e.expect(t, "PATCH", "/v1/threads/t1", `{"title":"Renamed"}`, http.StatusOK).decode(t, &again)
	if again != th {
		t.Fatalf("the same title again: %+v, want %+v unchanged", again, th)
	}

	for _, c := range []struct {
		path, body string
		status     int
		code       Code
	}{
		{"/v1/threads/t1", `{"title":""}`, 400, CodeInvalidField},
		{"/v1/threads/t1", `{}`, 400, CodeInvalidField},
		{"/v1/threads/t1", `{"title":"` + strings.Repeat("é", 513) + `"}`, 400, CodeInvalidField},
		{"/v1/threads/t1", `{"title":"x","author":"eve"}`, 400, CodeInvalidJSON},
		{"/v1/threads/t1", `{"title":7}`, 400, CodeInvalidJSON},
		{"/v1/threads/t1", ``, 400, CodeInvalidJSON},
		{"/v1/threads/bad:id", `{"title":"x"}`, 400, CodeInvalidID},
		{"/v1/threads/nope", `{"title":"x"}`, 404, CodeNotFound},
	} {
		if code := e.expect(t, "PATCH", c.path, c.body, c.status).errorCode(t); code != c.code {
			t.Errorf("PATCH %s %s: code %q, want %q", c.path, c.body, code, c.code)
		}
	}
	e.expect(t, "GET", "/v1/threads/t1", "", http.StatusOK).decode(t, &got)
	if got.Title != "Renamed" {
		t.Fatalf("a refused PATCH changed the title: %+v", got)
	}

	// Held: the title is kept until the hold is released.
	e.send(t, "PUT", "/admin/threads/t1/legal_hold", `{"legal_hold":true}`, "Bearer adm")
	if code := e.expect(t, "PATCH", "/v1/threads/t1", `{"title":"Hidden"}`, http.StatusConflict).errorCode(t); code != CodeLegalHold {
		t.Errorf("PATCH of a held thread: code %q, want legal_hold", code)
	}
	e.send(t, "PUT", "/admin/threads/t1/legal_hold", `{"legal_hold":false}`, "Bearer adm")
	e.expect(t, "PATCH", "/v1/threads/t1", `{"title":"Released"}`, http.StatusOK)

	// Soft-deleted: not found, as for its other routes; restored, it
	// takes the change.
	e.expect(t, "DELETE", "/v1/threads/t1", "", http.StatusNoContent)
	if code := e.expect(t, "PATCH", "/v1/threads/t1", `{"title":"Gone"}`, http.StatusNotFound).errorCode(t); code != CodeNotFound {
		t.Errorf("PATCH of a deleted thread: code %q", code)
	}
	e.expect(t, "GET", "/v1/threads/t1?include_deleted=true", "", http.StatusOK).decode(t, &got)
	if got.Title != "Released" {
		t.Fatalf("a deleted thread's title changed: %+v", got)
	}
	e.expect(t, "POST", "/v1/threads/t1/restore", "", http.StatusOK)
	e.expect(t, "PATCH", "/v1/threads/t1", `{"title":"Back"}`, http.StatusOK).decode(t, &got)
	if got.Title != "Back" {
		t.Fatalf("after restore: %+v", got)
	}
}
