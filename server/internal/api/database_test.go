package api

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// GET /admin/database names the database the server serves, as its folder
// records it for a process that cannot open it; every admin answer from
// that database names it in X-Progressdb-Database-Id, and the header is
// not given to a caller without the admin token.
func TestAdminDatabase(t *testing.T) {
	e := newEnv(t, Options{AdminToken: "adm", Retention: &fakeRetention{}})
	id, err := e.store.DatabaseID(t.Context(), false)
	if err != nil || id == "" {
		t.Fatalf("a new database's identity: %q %v", id, err)
	}
	r := e.send(t, "GET", "/admin/database", "", "Bearer adm")
	var got Database
	if err := json.Unmarshal(r.body, &got); r.status != http.StatusOK || err != nil {
		t.Fatalf("GET /admin/database: %d %s", r.status, r.body)
	}
	abs, _ := filepath.Abs(e.store.Path())
	if got.DatabaseID != id || got.Path != abs {
		t.Fatalf("answer %+v, want %s at %s", got, id, abs)
	}
	// The format and the seal are on the wire even when 1 and false.
	if got.Format != int(store.FormatBase) || got.Sealed || !strings.Contains(string(r.body), `"format":1`) ||
		!strings.Contains(string(r.body), `"sealed":false`) {
		t.Fatalf("answer %s, want format %d, not sealed", r.body, store.FormatBase)
	}
	if folder, err := store.FolderDatabaseID(e.store.Path()); err != nil || folder != id {
		t.Fatalf("the folder records %q (%v), the database is %s", folder, err, id)
	}
	if h := r.header.Get(HeaderDatabaseID); h != id {
		t.Fatalf("%s: %q, want %s", HeaderDatabaseID, h, id)
	}
	e.createThread(t, "t1")
	if r := e.send(t, "PUT", "/admin/threads/t1/legal_hold", `{"legal_hold":true}`, "Bearer adm"); r.status != http.StatusOK || r.header.Get(HeaderDatabaseID) != id {
		t.Fatalf("legal hold: %d, %s %q", r.status, HeaderDatabaseID, r.header.Get(HeaderDatabaseID))
	}
	if r := e.send(t, "GET", "/admin/database", "", ""); r.status != http.StatusUnauthorized || r.header.Get(HeaderDatabaseID) != "" {
		t.Fatalf("without the token: %d, %s %q", r.status, HeaderDatabaseID, r.header.Get(HeaderDatabaseID))
	}
	off := newEnv(t, Options{})
	off.expect(t, "GET", "/admin/database", "", http.StatusForbidden)
}

// GET /admin/database counts the threads, sealed and plain, only when
// asked (?threads=true): the identity check every command makes reads no
// record per thread. A value that is not a boolean is refused.
func TestAdminDatabaseThreadCounts(t *testing.T) {
	e := newEnv(t, Options{AdminToken: "adm", Retention: &fakeRetention{}})
	e.createThread(t, "t1")
	e.createThread(t, "t2")
	var got Database
	r := e.send(t, "GET", "/admin/database", "", "Bearer adm")
	if err := json.Unmarshal(r.body, &got); err != nil || got.Threads != nil {
		t.Fatalf("without threads=true: %s (%v), want no counts", r.body, err)
	}
	r = e.send(t, "GET", "/admin/database?threads=true", "", "Bearer adm")
	if err := json.Unmarshal(r.body, &got); r.status != http.StatusOK || err != nil || got.Threads == nil ||
		*got.Threads != (store.ThreadCounts{Plain: 2}) {
		t.Fatalf("threads=true: %d %s, want 2 plain threads", r.status, r.body)
	}
	if r := e.send(t, "GET", "/admin/database?threads=maybe", "", "Bearer adm"); r.status != http.StatusBadRequest {
		t.Fatalf("threads=maybe: %d %s, want 400", r.status, r.body)
	}
}
