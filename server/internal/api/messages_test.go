package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/store"
)

func TestMessageLifecycle(t *testing.T) {
	e := newEnv(t, Options{})
	e.createThread(t, "t1")

	r := e.expect(t, "POST", "/v1/threads/t1/messages", `{"id":"m1","author":"bob","body":{"text":"hi"}}`, http.StatusCreated)
	var m wire.Message
	r.decode(t, &m)
	if m.ID != "m1" || m.Thread != "t1" || m.Author != "bob" || m.Version != 1 || m.Deleted || !jsonEqual(m.Body, `{"text":"hi"}`) {
		t.Fatalf("appended %+v (body %s)", m, m.Body)
	}
	if loc := r.header.Get("Location"); loc != "/v1/threads/t1/messages/m1" {
		t.Errorf("Location %q", loc)
	}
	same := e.expect(t, "POST", "/v1/threads/t1/messages", `{"id":"m1","author":"bob","body":1}`, http.StatusConflict).errorText(t)
	// Message IDs are global: another thread gets the same 409 and the same
	// words, which name no thread.
	e.createThread(t, "t2")
	other := e.expect(t, "POST", "/v1/threads/t2/messages", `{"id":"m1","author":"eve","body":1}`, http.StatusConflict).errorText(t)
	if other != same || strings.Contains(other, "t1") {
		t.Errorf("409 texts differ or name the thread: %q vs %q", other, same)
	}
	e.expect(t, "POST", "/v1/threads/nope/messages", `{"author":"bob","body":1}`, http.StatusNotFound)
	// Any JSON value is a body.
	e.appendMessage(t, "t1", "m2", `"plain string"`)
	e.appendMessage(t, "t1", "m3", `[1,2,3]`)

	var edited wire.Message
	e.expect(t, "PUT", "/v1/threads/t1/messages/m1", `{"body":{"text":"hi, edited"}}`, http.StatusOK).decode(t, &edited)
	if edited.Version != 2 || !jsonEqual(edited.Body, `{"text":"hi, edited"}`) {
		t.Fatalf("edited %+v (body %s)", edited, edited.Body)
	}
	var latest wire.Message
	e.expect(t, "GET", "/v1/threads/t1/messages/m1", "", http.StatusOK).decode(t, &latest)
	if latest.Version != 2 || !jsonEqual(latest.Body, `{"text":"hi, edited"}`) {
		t.Fatalf("latest %+v", latest)
	}
	e.expect(t, "GET", "/v1/threads/t1/messages/nope", "", http.StatusNotFound)
	e.expect(t, "PUT", "/v1/threads/t1/messages/nope", `{"body":1}`, http.StatusNotFound)

	if ids := messageIDs(t, e, "/v1/threads/t1/messages"); ids != "m1 m2 m3" {
		t.Fatalf("listed %q", ids)
	}

	// Delete appends a tombstone: hidden unless include_deleted.
	e.expect(t, "DELETE", "/v1/threads/t1/messages/nope", "", http.StatusNotFound).errorText(t)
	e.expect(t, "DELETE", "/v1/threads/t1/messages/m1", "", http.StatusNoContent)
	e.expect(t, "GET", "/v1/threads/t1/messages/m1", "", http.StatusNotFound).errorText(t)
	var tomb wire.Message
	e.expect(t, "GET", "/v1/threads/t1/messages/m1?include_deleted=true", "", http.StatusOK).decode(t, &tomb)
	if !tomb.Deleted || tomb.DeletedTS.IsZero() || tomb.Version != 3 {
		t.Fatalf("tombstone %+v", tomb)
	}
	e.expect(t, "PUT", "/v1/threads/t1/messages/m1", `{"body":1}`, http.StatusNotFound)
	if ids := messageIDs(t, e, "/v1/threads/t1/messages"); ids != "m2 m3" {
		t.Fatalf("live list %q", ids)
	}
	if ids := messageIDs(t, e, "/v1/threads/t1/messages?include_deleted=true"); ids != "m1 m2 m3" {
		t.Fatalf("list with deleted %q", ids)
	}

	var versions versionList
	e.expect(t, "GET", "/v1/threads/t1/messages/m1/versions", "", http.StatusOK).decode(t, &versions)
	if len(versions.Versions) != 3 {
		t.Fatalf("%d versions, want 3: %+v", len(versions.Versions), versions.Versions)
	}
	for i, v := range versions.Versions {
		if v.Version != int64(i+1) || v.ID != "m1" {
			t.Errorf("version %d: %+v", i, v)
		}
	}
	if !versions.Versions[2].Deleted {
		t.Errorf("last version is not the tombstone: %+v", versions.Versions[2])
	}

	var restored wire.Message
	e.expect(t, "POST", "/v1/threads/t1/messages/m1/restore", "", http.StatusOK).decode(t, &restored)
	if restored.Deleted || !jsonEqual(restored.Body, `{"text":"hi, edited"}`) {
		t.Fatalf("restored %+v (body %s)", restored, restored.Body)
	}
	e.expect(t, "GET", "/v1/threads/t1/messages/m1", "", http.StatusOK)
	e.expect(t, "POST", "/v1/threads/t1/messages/nope/restore", "", http.StatusNotFound)
}

func TestMessagesOfDeletedThread(t *testing.T) {
	e := newEnv(t, Options{})
	e.createThread(t, "t1")
	e.appendMessage(t, "t1", "m1", `1`)
	e.expect(t, "DELETE", "/v1/threads/t1", "", http.StatusNoContent)

	e.expect(t, "POST", "/v1/threads/t1/messages", `{"author":"bob","body":1}`, http.StatusNotFound)
	e.expect(t, "PUT", "/v1/threads/t1/messages/m1", `{"body":2}`, http.StatusNotFound)
	e.expect(t, "GET", "/v1/threads/t1/messages", "", http.StatusNotFound)
	e.expect(t, "GET", "/v1/threads/t1/messages/m1", "", http.StatusNotFound)
	e.expect(t, "GET", "/v1/threads/t1/messages/m1/versions", "", http.StatusNotFound)
	if ids := messageIDs(t, e, "/v1/threads/t1/messages?include_deleted=true"); ids != "m1" {
		t.Fatalf("list with deleted %q", ids)
	}
	e.expect(t, "GET", "/v1/threads/t1/messages/m1?include_deleted=true", "", http.StatusOK)
	e.expect(t, "GET", "/v1/threads/t1/messages/m1/versions?include_deleted=true", "", http.StatusOK)
}

func TestListMessagesPagination(t *testing.T) {
	e := newEnv(t, Options{})
	e.createThread(t, "t1")
	for _, id := range []string{"a", "b", "c"} {
		e.appendMessage(t, "t1", id, `1`)
	}
	var got []string
	cursor := ""
	for page := 0; ; page++ {
		if page > 3 {
			t.Fatalf("pagination does not end; got %v", got)
		}
		var list messageList
		e.expect(t, "GET", "/v1/threads/t1/messages?limit=1&cursor="+cursor, "", http.StatusOK).decode(t, &list)
		if len(list.Messages) > 1 {
			t.Fatalf("page of %d with limit=1", len(list.Messages))
		}
		for _, m := range list.Messages {
			got = append(got, m.ID)
		}
		if list.NextCursor == "" {
			break
		}
		cursor = list.NextCursor
	}
	if len(got) != 3 || got[0] != "a" || got[1] != "b" || got[2] != "c" {
		t.Fatalf("paged %v", got)
	}
	e.expect(t, "GET", "/v1/threads/t1/messages?limit=0", "", http.StatusBadRequest)
	e.expect(t, "GET", "/v1/threads/t1/messages?include_deleted=2", "", http.StatusBadRequest)
}

func TestMessagePurge(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	e.createThread(t, "t1")
	e.appendMessage(t, "t1", "m1", `1`)
	e.expect(t, "DELETE", "/v1/threads/t1/messages/m1", "", http.StatusNoContent)

	tomb, err := e.store.GetMessage(ctx, "t1", "m1")
	if err != nil {
		t.Fatal(err)
	}
	marker := store.PurgeMarker{
		Kind: store.KindMessage, ID: "m1", ThreadID: "t1", DeletedTS: tomb.DeletedTS,
		RunID: "run1", StartedAt: time.Now().UnixNano(),
	}
	if err := e.store.BeginPurge(ctx, marker); err != nil {
		t.Fatalf("begin purge: %v", err)
	}
	e.expect(t, "POST", "/v1/threads/t1/messages/m1/restore", "", http.StatusConflict).errorText(t)

	if _, err := e.store.PurgeMessage(ctx, "t1", "m1", store.PurgeOptions{BatchSize: 1}); err != nil {
		t.Fatalf("purge: %v", err)
	}
	// A run clears the marker once the item's audit record is durable.
	if err := e.store.ClearPurges(ctx, []store.PurgeMarker{marker}); err != nil {
		t.Fatalf("clear purge marker: %v", err)
	}
	e.expect(t, "GET", "/v1/threads/t1/messages/m1/versions", "", http.StatusNotFound)
	e.expect(t, "GET", "/v1/threads/t1/messages/m1?include_deleted=true", "", http.StatusNotFound)
	e.expect(t, "POST", "/v1/threads/t1/messages/m1/restore", "", http.StatusNotFound)
}

func messageIDs(t *testing.T, e *testEnv, path string) string {
	t.Helper()
	var list messageList
	e.expect(t, "GET", path, "", http.StatusOK).decode(t, &list)
	ids := ""
	for i, m := range list.Messages {
		if i > 0 {
			ids += " "
		}
		ids += m.ID
	}
	return ids
}

func jsonEqual(got json.RawMessage, want string) bool {
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// created_ts is the message's first version's time: the same in every
// answer about the message (append, get, list, edit, versions, delete,
// restore) while ts moves with each version.
func TestMessageCreatedTSIsStableAcrossEdits(t *testing.T) {
	e := newEnv(t, Options{})
	e.createThread(t, "t1")
	first := e.appendMessage(t, "t1", "m1", `"v1"`)
	if first.CreatedTS.IsZero() || !first.CreatedTS.Equal(first.TS.Time) {
		t.Fatalf("a new message: created_ts %v, ts %v; want both its write time", first.CreatedTS, first.TS)
	}
	created := first.CreatedTS.Time
	check := func(what string, m wire.Message) {
		t.Helper()
		if !m.CreatedTS.Equal(created) {
			t.Errorf("%s: created_ts %v, want %v", what, m.CreatedTS, created)
		}
	}
	var m wire.Message
	for i := range 3 {
		e.expect(t, "PUT", "/v1/threads/t1/messages/m1", fmt.Sprintf(`{"body":"v%d"}`, i+2), http.StatusOK).decode(t, &m)
		check("edit", m)
		if !m.TS.After(created) {
			t.Errorf("edit %d: ts %v is not after created_ts %v", i, m.TS, created)
		}
	}
	e.expect(t, "GET", "/v1/threads/t1/messages/m1", "", http.StatusOK).decode(t, &m)
	check("get", m)
	var list struct {
		Messages []wire.Message `json:"messages"`
		Versions []wire.Message `json:"versions"`
	}
	e.expect(t, "GET", "/v1/threads/t1/messages", "", http.StatusOK).decode(t, &list)
	if len(list.Messages) != 1 {
		t.Fatalf("list: %+v", list)
	}
	check("list", list.Messages[0])
	e.expect(t, "GET", "/v1/threads/t1/messages/m1/versions?limit=2", "", http.StatusOK).decode(t, &list)
	for _, v := range list.Versions {
		check(fmt.Sprintf("version %d", v.Version), v)
	}
	e.expect(t, "DELETE", "/v1/threads/t1/messages/m1", "", http.StatusNoContent)
	e.expect(t, "GET", "/v1/threads/t1/messages/m1?include_deleted=true", "", http.StatusOK).decode(t, &m)
	check("tombstone", m)
	e.expect(t, "POST", "/v1/threads/t1/messages/m1/restore", "", http.StatusOK).decode(t, &m)
	check("restore", m)
	if m.Version != 6 {
		t.Errorf("restored version %d, want 6", m.Version)
	}
}
