package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

func TestCreateAndGetThread(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)

	got := createThread(t, s, "t1")
	want := store.Thread{ID: "t1", Title: "title t1", Author: "ana", CreatedTS: c.Now().UnixNano(), UpdatedTS: c.Now().UnixNano()}
	if got != want {
		t.Fatalf("created %+v, want %+v", got, want)
	}
	read, err := s.GetThread(ctx, "t1")
	if err != nil || read != want {
		t.Fatalf("GetThread = %+v, %v; want %+v", read, err, want)
	}

	_, err = s.CreateThread(ctx, store.Thread{ID: "t1"})
	wantErr(t, err, store.ErrExists)

	deleteThread(t, s, "t1")
	_, err = s.CreateThread(ctx, store.Thread{ID: "t1"})
	wantErr(t, err, store.ErrExists) // a soft-deleted thread keeps its ID

	_, err = s.GetThread(ctx, "nope")
	wantErr(t, err, store.ErrNotFound)
}

func TestCreateThreadGeneratesSortableIDs(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	var prev string
	for i := range 20 {
		th, err := s.CreateThread(ctx, store.Thread{Title: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.ValidateID(th.ID); err != nil {
			t.Fatalf("generated %q: %v", th.ID, err)
		}
		if th.ID <= prev {
			t.Fatalf("generated %q after %q", th.ID, prev)
		}
		prev = th.ID
		c.Advance(time.Duration(i%2) * time.Millisecond)
	}
}

func TestEveryMethodValidatesIDs(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	createThread(t, s, "t")
	appendMessage(t, s, "t", "m", "x")
	for _, bad := range []string{"", "a:b", "a/b", "a b", "é", strings.Repeat("a", 129)} {
		calls := map[string]func() error{
			"CreateThread":   func() error { _, err := s.CreateThread(ctx, store.Thread{ID: bad}); return err },
			"GetThread":      func() error { _, err := s.GetThread(ctx, bad); return err },
			"DeleteThread":   func() error { _, err := s.DeleteThread(ctx, bad); return err },
			"RestoreThread":  func() error { _, err := s.RestoreThread(ctx, bad); return err },
			"SetLegalHold":   func() error { _, err := s.SetLegalHold(ctx, bad, true); return err },
			"AppendMessage":  func() error { _, err := s.AppendMessage(ctx, "t", store.Message{ID: bad}); return err },
			"AppendToBad":    func() error { _, err := s.AppendMessage(ctx, bad, store.Message{ID: "m2"}); return err },
			"GetMessage":     func() error { _, err := s.GetMessage(ctx, "t", bad); return err },
			"EditMessage":    func() error { _, err := s.EditMessage(ctx, bad, "m", nil); return err },
			"DeleteMessage":  func() error { _, err := s.DeleteMessage(ctx, "t", bad); return err },
			"RestoreMessage": func() error { _, err := s.RestoreMessage(ctx, bad, "m"); return err },
			"ListMessages":   func() error { _, _, err := s.ListMessages(ctx, bad, store.ListOptions{}); return err },
			"ListVersions":   func() error { _, err := s.ListVersions(ctx, "t", bad); return err },
			"PurgeThread":    func() error { _, err := s.PurgeThread(ctx, bad, store.PurgeOptions{}); return err },
			"PurgeMessage":   func() error { _, err := s.PurgeMessage(ctx, "t", bad, store.PurgeOptions{}); return err },
			"ItemExists":     func() error { _, err := s.ItemExists(ctx, store.KindThread, bad); return err },
			"BeginPurge": func() error {
				return s.BeginPurge(ctx, store.PurgeMarker{Kind: store.KindThread, ID: bad, DeletedTS: 1})
			},
			"StampDeletion": func() error {
				return s.StampDeletion(ctx, store.DeletionEntry{Kind: store.KindMessage, ID: "m", ThreadID: bad}, 1, "run")
			},
		}
		if bad == "" {
			// An empty ID asks for a generated one.
			delete(calls, "CreateThread")
			delete(calls, "AppendMessage")
		}
		for name, call := range calls {
			if err := call(); err == nil || !strings.Contains(err.Error(), store.ErrInvalidID.Error()) {
				t.Errorf("%s(%q) = %v, want ErrInvalidID", name, bad, err)
			}
		}
	}
}

func TestDeleteThreadKeepsFirstDeletedTSAndRestore(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	createThread(t, s, "t")

	c.Advance(time.Hour)
	first := deleteThread(t, s, "t")
	if !first.Deleted || first.DeletedTS != c.Now().UnixNano() {
		t.Fatalf("deleted thread = %+v", first)
	}
	c.Advance(time.Hour)
	again := deleteThread(t, s, "t")
	if again.DeletedTS != first.DeletedTS {
		t.Fatalf("repeated delete moved deleted_ts from %d to %d", first.DeletedTS, again.DeletedTS)
	}
	if got := indexEntries(t, s, store.KindThread); len(got) != 1 || got[0].DeletedTS != first.DeletedTS || got[0].ID != "t" {
		t.Fatalf("index after two deletes = %+v", got)
	}

	restored, err := s.RestoreThread(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if restored.Deleted || restored.DeletedTS != 0 || restored.UpdatedTS != c.Now().UnixNano() {
		t.Fatalf("restored thread = %+v", restored)
	}
	if got := indexEntries(t, s, store.KindThread); len(got) != 0 {
		t.Fatalf("index after restore = %+v", got)
	}
	// Restoring a live thread changes nothing.
	if again, err := s.RestoreThread(ctx, "t"); err != nil || again != restored {
		t.Fatalf("restore of live thread = %+v, %v", again, err)
	}
	_, err = s.DeleteThread(ctx, "missing")
	wantErr(t, err, store.ErrNotFound)
	_, err = s.RestoreThread(ctx, "missing")
	wantErr(t, err, store.ErrNotFound)
}

func TestLegalHold(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	createThread(t, s, "t")
	th, err := s.SetLegalHold(ctx, "t", true)
	if err != nil || !th.LegalHold {
		t.Fatalf("SetLegalHold = %+v, %v", th, err)
	}
	if th, _ := s.GetThread(ctx, "t"); !th.LegalHold {
		t.Fatal("legal hold not stored")
	}
	deleted := deleteThread(t, s, "t")
	err = s.BeginPurge(ctx, store.PurgeMarker{Kind: store.KindThread, ID: "t", DeletedTS: deleted.DeletedTS})
	wantErr(t, err, store.ErrNotEligible)
	if _, err := s.SetLegalHold(ctx, "t", false); err != nil {
		t.Fatal(err)
	}
	if err := s.BeginPurge(ctx, store.PurgeMarker{Kind: store.KindThread, ID: "t", DeletedTS: deleted.DeletedTS}); err != nil {
		t.Fatalf("BeginPurge after hold released: %v", err)
	}
	_, err = s.SetLegalHold(ctx, "t", true)
	wantErr(t, err, store.ErrPurgeInProgress)
}

func TestListThreadsPagesInKeyOrder(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	ids := []string{"b", "a", "a-1", "ab", "a.b", "c", "d"}
	for _, id := range ids {
		createThread(t, s, id)
	}
	appendMessage(t, s, "a", "m1", "x") // log keys sort before meta
	deleteThread(t, s, "c")

	var got []string
	cursor := ""
	pages := 0
	for {
		page, next, err := s.ListThreads(ctx, store.ListOptions{Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, th := range page {
			got = append(got, th.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	// Key order: '-' and '.' sort before ':', letters after it.
	want := "a-1 a.b a ab b d"
	if strings.Join(got, " ") != want || pages != 3 {
		t.Fatalf("listed %v in %d pages, want %s in 3", got, pages, want)
	}

	all, next, err := s.ListThreads(ctx, store.ListOptions{IncludeDeleted: true})
	if err != nil || next != "" || len(all) != len(ids) {
		t.Fatalf("list with deleted = %d threads, cursor %q, %v", len(all), next, err)
	}
	_, _, err = s.ListThreads(ctx, store.ListOptions{Cursor: "bad:cursor"})
	wantErr(t, err, store.ErrInvalidCursor)
	_, _, err = s.ListThreads(ctx, store.ListOptions{Limit: -1})
	wantErr(t, err, store.ErrInvalidArgument)
}

func TestListThreadsSkipsMalformedMetadata(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	createThread(t, s, "a")
	createThread(t, s, "c")
	if err := s.DB().Set([]byte("thread:b:meta"), []byte("{broken"), nil); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.ListThreads(ctx, store.ListOptions{IncludeDeleted: true})
	if err != nil || len(got) != 2 || got[0].ID != "a" || got[1].ID != "c" {
		t.Fatalf("ListThreads = %+v, %v", got, err)
	}
	_, err = s.GetThread(ctx, "b")
	wantErr(t, err, store.ErrMalformed)
}

// LegalHolds finds held threads, deleted or not, among threads with
// messages (whose keys lie between thread metadata), and not released ones.
func TestLegalHoldsListsHeldThreads(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	for _, id := range []string{"a", "a-1", "b", "c", "d"} {
		createThread(t, s, id)
		appendMessage(t, s, id, "m-"+id, "hello")
	}
	for _, id := range []string{"a-1", "b", "d"} {
		if _, err := s.SetLegalHold(ctx, id, true); err != nil {
			t.Fatal(err)
		}
	}
	deleteThread(t, s, "b")
	if _, err := s.SetLegalHold(ctx, "d", false); err != nil {
		t.Fatal(err)
	}
	held, err := s.LegalHolds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, th := range held {
		ids = append(ids, th.ID)
	}
	if got := strings.Join(ids, ","); got != "a-1,b" {
		t.Fatalf("LegalHolds = %s, want a-1,b", got)
	}
	if !held[1].Deleted {
		t.Fatal("held deleted thread listed as live")
	}
}

func TestSetTitle(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	created := createThread(t, s, "t")
	c.Advance(time.Second)
	th, err := s.SetTitle(ctx, "t", "new")
	if err != nil || th.Title != "new" || th.UpdatedTS != created.UpdatedTS+int64(time.Second) || th.CreatedTS != created.CreatedTS {
		t.Fatalf("SetTitle: %+v, %v", th, err)
	}
	c.Advance(time.Second)
	if again, err := s.SetTitle(ctx, "t", "new"); err != nil || again != th {
		t.Fatalf("the same title again: %+v, %v; want %+v unchanged", again, err, th)
	}
	if _, err := s.SetLegalHold(ctx, "t", true); err != nil {
		t.Fatal(err)
	}
	_, err = s.SetTitle(ctx, "t", "held")
	wantErr(t, err, store.ErrLegalHold)
	if _, err := s.SetLegalHold(ctx, "t", false); err != nil {
		t.Fatal(err)
	}
	deleteThread(t, s, "t")
	_, err = s.SetTitle(ctx, "t", "deleted")
	wantErr(t, err, store.ErrNotFound)
	_, err = s.SetTitle(ctx, "missing", "x")
	wantErr(t, err, store.ErrNotFound)
	_, err = s.SetTitle(ctx, "bad:id", "x")
	wantErr(t, err, store.ErrInvalidID)
	got, err := s.GetThread(ctx, "t")
	if err != nil || got.Title != "new" {
		t.Fatalf("after refused changes: %+v, %v", got, err)
	}
}
