package store_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// Markers planted in sealed content: '-' is not a base64 character, so no
// ciphertext can hold one by chance.
const (
	titleMarker  = "title-marker-7Qz"
	authorMarker = "author-marker-7Qz"
	bodyMarker   = "body-marker-7Qz"
	editMarker   = "edit-marker-7Qz"
)

// sealedStore opens a store at dir/data sealing with a key store at
// dir/keys under a real local KEK. close closes both (the store, then the
// key store through Options.Closer).
func sealedStore(t *testing.T, dir string, c *clock) *store.Store {
	t.Helper()
	ctx := context.Background()
	keeper, err := keystore.OpenKEK(ctx, "base64key://"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	ks, err := keystore.Open(ctx, filepath.Join(dir, "keys"), keystore.Options{Keeper: keeper, DataPath: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(filepath.Join(dir, "data"), store.Options{Now: c.Now, Sealer: ks, Closer: ks})
	if err != nil {
		_ = ks.Close()
		t.Fatal(err)
	}
	return s
}

// fillSealed writes a thread and a message with markers in every sealed
// field, edits it, deletes and restores it, and checks every read on the
// way.
func fillSealed(t *testing.T, s *store.Store) {
	t.Helper()
	ctx := context.Background()
	th, err := s.CreateThread(ctx, store.Thread{ID: "t1", Title: titleMarker, Author: authorMarker})
	if err != nil {
		t.Fatal(err)
	}
	if th.Title != titleMarker || th.Author != authorMarker {
		t.Fatalf("created %+v", th)
	}
	m, err := s.AppendMessage(ctx, "t1", store.Message{ID: "m1", Author: authorMarker, Body: json.RawMessage(`{"text":"` + bodyMarker + `"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendMessage(ctx, "t1", store.Message{ID: "m2", Author: "bo", Body: json.RawMessage(`"hi"`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EditMessage(ctx, "t1", "m1", json.RawMessage(`{"text":"`+editMarker+`"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteMessage(ctx, "t1", "m1"); err != nil {
		t.Fatal(err)
	}
	got, err := s.RestoreMessage(ctx, "t1", "m1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Author != authorMarker || string(got.Body) != `{"text":"`+editMarker+`"}` || got.Version != 4 || m.Version != 1 {
		t.Fatalf("restored %+v", got)
	}
}

func TestSealedRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := sealedStore(t, dir, newClock())
	fillSealed(t, s)
	if _, err := s.SetTitle(ctx, "t1", "new "+titleMarker); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetLegalHold(ctx, "t1", true); err != nil {
		t.Fatal(err)
	}
	check := func(s *store.Store) {
		t.Helper()
		th, err := s.GetThread(ctx, "t1")
		if err != nil || th.Title != "new "+titleMarker || th.Author != authorMarker || !th.LegalHold || th.Unreadable {
			t.Fatalf("GetThread = %+v, %v", th, err)
		}
		list, _, err := s.ListThreads(ctx, store.ListOptions{IncludeDeleted: true})
		if err != nil || len(list) != 1 || list[0].Title != th.Title {
			t.Fatalf("ListThreads = %+v, %v", list, err)
		}
		msgs, _, err := s.ListMessages(ctx, "t1", store.ListOptions{})
		if err != nil || len(msgs) != 2 || msgs[0].Author != authorMarker || msgs[1].Author != "bo" || string(msgs[1].Body) != `"hi"` {
			t.Fatalf("ListMessages = %+v, %v", msgs, err)
		}
		versions, err := s.ListVersions(ctx, "t1", "m1")
		if err != nil || len(versions) != 4 {
			t.Fatalf("ListVersions = %+v, %v", versions, err)
		}
		wantBodies := []string{`{"text":"` + bodyMarker + `"}`, `{"text":"` + editMarker + `"}`, "null", `{"text":"` + editMarker + `"}`}
		for i, v := range versions {
			if v.Author != authorMarker || string(v.Body) != wantBodies[i] || v.Unreadable {
				t.Errorf("version %d = %+v", i+1, v)
			}
		}
		ids, err := s.MessagesByKey(ctx, "t1", versions[0].Key)
		if err != nil || len(ids) != 1 || ids[0] != "m1" {
			t.Errorf("MessagesByKey(author's key) = %v, %v", ids, err)
		}
	}
	check(s)
	// Sealed on disk: the raw records hold a key number and a seal, no
	// field of content.
	raw, closer, err := s.DB().Get([]byte("version:msg:m1:00000000000000000001"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte(`"key":1,"sealed":"`)) || bytes.Contains(raw, []byte(`"author"`)) {
		t.Errorf("stored version: %s", raw)
	}
	closer.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// After a restart, from the key store's files.
	s = sealedStore(t, dir, newClock())
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// No marker in any file of the data directory, WAL and tables decoded;
	// the author is in no file of the key store either.
	storetest.RequireNone(t, filepath.Join(dir, "data"), titleMarker, authorMarker, bodyMarker, editMarker)
	storetest.RequireNone(t, filepath.Join(dir, "keys"), titleMarker, authorMarker, bodyMarker, editMarker)
}

// The same writes without a Sealer leave every marker in the files: the
// scan of TestSealedRoundTrip can fail.
func TestPlainStoreHoldsTheMarkers(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(dir, store.Options{Now: newClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	fillSealed(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	storetest.RequireAll(t, dir, titleMarker, authorMarker, bodyMarker, editMarker)
}

// A seal copied to another record does not open there: the associated
// data binds thread, message, version and key number.
func TestSealedRecordCannotMove(t *testing.T) {
	ctx := context.Background()
	s := sealedStore(t, t.TempDir(), newClock())
	t.Cleanup(func() { _ = s.Close() })
	fillSealed(t, s)
	if _, err := s.CreateThread(ctx, store.Thread{ID: "t2", Title: "other", Author: authorMarker}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendMessage(ctx, "t2", store.Message{ID: "m3", Author: authorMarker, Body: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	db := s.DB()
	get := func(k string) []byte {
		v, c, err := db.Get([]byte(k))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return bytes.Clone(v)
	}
	set := func(k string, v []byte) {
		if err := db.Set([]byte(k), v, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	v1 := get("version:msg:m1:00000000000000000001")
	sealedOf := func(rec []byte) string {
		_, after, _ := strings.Cut(string(rec), `"sealed":"`)
		s, _, _ := strings.Cut(after, `"`)
		return s
	}
	// Version 1's seal pasted over version 2 (undoing the edit).
	v2 := get("version:msg:m1:00000000000000000002")
	set("version:msg:m1:00000000000000000002", []byte(strings.Replace(string(v2), sealedOf(v2), sealedOf(v1), 1)))
	// m1's first version moved to m3 of thread t2 (same author, key 1 there too).
	m3 := get("version:msg:m3:00000000000000000001")
	set("version:msg:m3:00000000000000000001", []byte(strings.Replace(string(m3), sealedOf(m3), sealedOf(v1), 1)))
	// m2 (bo's, key 2) pointed at key 1 with m1's seal: another message and key.
	m2 := get("version:msg:m2:00000000000000000001")
	forged := strings.Replace(string(m2), sealedOf(m2), sealedOf(v1), 1)
	set("version:msg:m2:00000000000000000001", []byte(strings.Replace(forged, `"key":2`, `"key":1`, 1)))

	versions, err := s.ListVersions(ctx, "t1", "m1")
	if err != nil {
		t.Fatal(err)
	}
	if versions[0].Unreadable || !versions[1].Unreadable || versions[1].Author != "" || versions[1].Body != nil {
		t.Errorf("versions 1, 2 = %+v, %+v; want the pasted seal unreadable", versions[0], versions[1])
	}
	for _, ref := range [][2]string{{"t2", "m3"}, {"t1", "m2"}} {
		m, err := s.GetMessage(ctx, ref[0], ref[1])
		if err != nil || !m.Unreadable || m.Author != "" {
			t.Errorf("moved seal in %s/%s = %+v, %v", ref[0], ref[1], m, err)
		}
	}
}

// Once the thread's keys are destroyed every record of it reads with no
// content, changes that need the content are refused, and the flags still
// work (a delete, a purge).
func TestSealedThreadAfterItsKeysAreGone(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	keeper, err := keystore.OpenKEK(ctx, "base64key://"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	ks, err := keystore.Open(ctx, filepath.Join(dir, "keys"), keystore.Options{Keeper: keeper})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ks.Close() })
	s, err := store.Open(filepath.Join(dir, "data"), store.Options{Now: newClock().Now, Sealer: ks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	fillSealed(t, s)
	if n, err := ks.DestroyThread(ctx, "t1"); err != nil || n != 2 {
		t.Fatalf("DestroyThread = %d, %v", n, err)
	}
	th, err := s.GetThread(ctx, "t1")
	if err != nil || !th.Unreadable || th.Title != "" || th.Author != "" {
		t.Fatalf("GetThread = %+v, %v", th, err)
	}
	m, err := s.GetMessage(ctx, "t1", "m1")
	if err != nil || !m.Unreadable || m.Author != "" || m.Body != nil {
		t.Fatalf("GetMessage = %+v, %v", m, err)
	}
	if _, err := s.EditMessage(ctx, "t1", "m1", json.RawMessage(`2`)); !errors.Is(err, store.ErrUnreadable) {
		t.Errorf("EditMessage = %v, want ErrUnreadable", err)
	}
	if _, err := s.SetTitle(ctx, "t1", "x"); !errors.Is(err, store.ErrUnreadable) {
		t.Errorf("SetTitle = %v, want ErrUnreadable", err)
	}
	// A flag change carries the seal as it is.
	th, err = s.DeleteThread(ctx, "t1")
	if err != nil || !th.Deleted || !th.Unreadable {
		t.Fatalf("DeleteThread = %+v, %v", th, err)
	}
	// A purge reads the sealed versions' heads (fastHead's sealed shape).
	if err := s.BeginPurge(ctx, store.PurgeMarker{Kind: store.KindThread, ID: "t1", ThreadID: "t1", DeletedTS: th.DeletedTS, RunID: "r"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PurgeThread(ctx, "t1", store.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetThread(ctx, "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after purge: %v", err)
	}
	if ids, err := s.MessagesByKey(ctx, "t1", 1); err != nil || len(ids) != 0 {
		t.Errorf("key index after purge: %v, %v", ids, err)
	}
}

// A message purge takes its key-number index entry with it.
func TestSealedMessagePurgeDropsItsKeyIndexEntry(t *testing.T) {
	ctx := context.Background()
	s := sealedStore(t, t.TempDir(), newClock())
	t.Cleanup(func() { _ = s.Close() })
	fillSealed(t, s)
	m, err := s.DeleteMessage(ctx, "t1", "m2")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.BeginPurge(ctx, store.PurgeMarker{Kind: store.KindMessage, ID: "m2", ThreadID: "t1", DeletedTS: m.DeletedTS, RunID: "r"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PurgeMessage(ctx, "t1", "m2", store.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	if ids, err := s.MessagesByKey(ctx, "t1", m.Key); err != nil || len(ids) != 0 {
		t.Errorf("key index of m2's key after its purge: %v, %v", ids, err)
	}
	if ids, err := s.MessagesByKey(ctx, "t1", 1); err != nil || len(ids) != 1 {
		t.Errorf("key index of m1's key: %v, %v", ids, err)
	}
}

// A shredded thread purge leaves the erase step only the spans of plain
// records (written before sealing): sealed ones are noise without their
// keys. Without Shredded every purged span is collected, as before.
func TestShreddedPurgeErasesOnlyPlainRecords(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := newClock()
	plain, err := store.Open(filepath.Join(dir, "data"), store.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range []string{"old", "mixed"} {
		if _, err := plain.CreateThread(ctx, store.Thread{ID: tid, Title: "x", Author: "ana"}); err != nil {
			t.Fatal(err)
		}
		if _, err := plain.AppendMessage(ctx, tid, store.Message{ID: tid + "-m", Author: "ana", Body: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}
	s := sealedStore(t, dir, c)
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.CreateThread(ctx, store.Thread{ID: "new", Title: "x", Author: "ana"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendMessage(ctx, "new", store.Message{ID: "new-m", Author: "ana", Body: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	// "mixed": a title changed and a message edited after sealing: sealed
	// metadata that replaced a plain one (still in a file, so its span),
	// one plain version left. "old" is sealed by its delete, likewise.
	if _, err := s.SetTitle(ctx, "mixed", "y"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EditMessage(ctx, "mixed", "mixed-m", json.RawMessage(`2`)); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"new": 0, "old": 2, "mixed": 2}
	for _, tid := range []string{"new", "old", "mixed"} {
		th, err := s.DeleteThread(ctx, tid)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.BeginPurge(ctx, store.PurgeMarker{Kind: store.KindThread, ID: tid, ThreadID: tid, DeletedTS: th.DeletedTS, RunID: "r"}); err != nil {
			t.Fatal(err)
		}
		var spans store.EraseSpans
		if _, err := s.PurgeThread(ctx, tid, store.PurgeOptions{Erase: &spans, Shredded: true}); err != nil {
			t.Fatal(err)
		}
		if spans.Len() != want[tid] {
			t.Errorf("thread %s: %d spans to erase, want %d", tid, spans.Len(), want[tid])
		}
	}
	// Not shredded: the thread's span and its message's.
	if _, err := s.CreateThread(ctx, store.Thread{ID: "kept", Title: "x", Author: "ana"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendMessage(ctx, "kept", store.Message{ID: "kept-m", Author: "ana", Body: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	th, err := s.DeleteThread(ctx, "kept")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.BeginPurge(ctx, store.PurgeMarker{Kind: store.KindThread, ID: "kept", ThreadID: "kept", DeletedTS: th.DeletedTS, RunID: "r"}); err != nil {
		t.Fatal(err)
	}
	var spans store.EraseSpans
	if _, err := s.PurgeThread(ctx, "kept", store.PurgeOptions{Erase: &spans}); err != nil {
		t.Fatal(err)
	}
	if spans.Len() != 2 {
		t.Errorf("unshredded purge: %d spans, want 2", spans.Len())
	}
}
