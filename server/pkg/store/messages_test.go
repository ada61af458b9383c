package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

func TestMessageVersionsTombstoneAndRestore(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	createThread(t, s, "t")

	m1 := appendMessage(t, s, "t", "m", "first")
	if m1.Version != 1 || m1.Thread != "t" || m1.TS != c.Now().UnixNano() || m1.Deleted {
		t.Fatalf("appended %+v", m1)
	}
	c.Advance(time.Minute)
	m2, err := s.EditMessage(ctx, "t", "m", json.RawMessage(`{"text":"second"}`))
	if err != nil || m2.Version != 2 || string(m2.Body) != `{"text":"second"}` || m2.TS != c.Now().UnixNano() {
		t.Fatalf("EditMessage = %+v, %v", m2, err)
	}

	c.Advance(time.Minute)
	tomb := deleteMessage(t, s, "t", "m")
	if !tomb.Deleted || tomb.DeletedTS != c.Now().UnixNano() || tomb.Version != 3 {
		t.Fatalf("tombstone = %+v", tomb)
	}
	c.Advance(time.Minute)
	again := deleteMessage(t, s, "t", "m")
	if again.DeletedTS != tomb.DeletedTS || again.Version != 3 {
		t.Fatalf("repeated delete = %+v, want the first tombstone", again)
	}
	if got, err := s.GetMessage(ctx, "t", "m"); err != nil || !got.Deleted {
		t.Fatalf("GetMessage after delete = %+v, %v", got, err)
	}
	_, err = s.EditMessage(ctx, "t", "m", json.RawMessage(`1`))
	wantErr(t, err, store.ErrNotFound)
	if got := indexEntries(t, s, store.KindMessage); len(got) != 1 || got[0] != (store.DeletionEntry{Kind: store.KindMessage, ID: "m", ThreadID: "t", DeletedTS: tomb.DeletedTS}) {
		t.Fatalf("index = %+v", got)
	}

	restored, err := s.RestoreMessage(ctx, "t", "m")
	if err != nil || restored.Deleted || restored.Version != 4 || string(restored.Body) != `{"text":"second"}` {
		t.Fatalf("RestoreMessage = %+v, %v", restored, err)
	}
	if got := indexEntries(t, s, store.KindMessage); len(got) != 0 {
		t.Fatalf("index after restore = %+v", got)
	}

	versions, err := s.ListVersions(ctx, "t", "m")
	if err != nil || len(versions) != 4 {
		t.Fatalf("ListVersions = %d versions, %v", len(versions), err)
	}
	for i, v := range versions {
		if v.Version != int64(i+1) {
			t.Fatalf("version %d numbered %d", i, v.Version)
		}
	}
	if !versions[2].Deleted || string(versions[0].Body) != `{"text":"first"}` {
		t.Fatalf("versions = %+v", versions)
	}
}

func TestMessagesAreScopedToTheirThread(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	createThread(t, s, "a")
	createThread(t, s, "b")
	appendMessage(t, s, "a", "m", "x")

	_, err := s.GetMessage(ctx, "b", "m")
	wantErr(t, err, store.ErrNotFound)
	_, err = s.EditMessage(ctx, "b", "m", json.RawMessage(`1`))
	wantErr(t, err, store.ErrNotFound)
	_, err = s.DeleteMessage(ctx, "b", "m")
	wantErr(t, err, store.ErrNotFound)
	_, err = s.ListVersions(ctx, "b", "m")
	wantErr(t, err, store.ErrNotFound)

	// Message IDs are global, and a refusal reads the same whichever
	// thread holds the ID: it names neither.
	_, errOther := s.AppendMessage(ctx, "b", store.Message{ID: "m"})
	wantErr(t, errOther, store.ErrIDUnavailable)
	_, errSame := s.AppendMessage(ctx, "a", store.Message{ID: "m"})
	wantErr(t, errSame, store.ErrIDUnavailable)
	if errOther.Error() != errSame.Error() || strings.Contains(errOther.Error(), "thread a") {
		t.Fatalf("refusals differ or name the thread:\n%v\n%v", errOther, errSame)
	}
}

func TestAppendAndEditRules(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	createThread(t, s, "t")
	appendMessage(t, s, "t", "m", "x")

	_, err := s.AppendMessage(ctx, "missing", store.Message{})
	wantErr(t, err, store.ErrNotFound)
	_, err = s.AppendMessage(ctx, "t", store.Message{Body: json.RawMessage(`{bad`)})
	wantErr(t, err, store.ErrInvalidArgument)

	m, err := s.AppendMessage(ctx, "t", store.Message{Author: "bo"})
	if err != nil || store.ValidateID(m.ID) != nil || string(m.Body) != "null" {
		t.Fatalf("append with generated id and no body = %+v, %v", m, err)
	}

	deleteThread(t, s, "t")
	_, err = s.AppendMessage(ctx, "t", store.Message{ID: "m2"})
	wantErr(t, err, store.ErrNotFound)
	_, err = s.EditMessage(ctx, "t", "m", json.RawMessage(`2`))
	wantErr(t, err, store.ErrNotFound)
}

func TestAppendSameIDConcurrentlyInTwoThreads(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	for i := range 8 {
		createThread(t, s, fmt.Sprint("t", i))
	}
	for round := range 20 {
		mid := fmt.Sprint("m", round)
		errs := make(chan error, 8)
		for i := range 8 {
			go func() {
				_, err := s.AppendMessage(ctx, fmt.Sprint("t", i), store.Message{ID: mid})
				errs <- err
			}()
		}
		ok := 0
		for range 8 {
			if err := <-errs; err == nil {
				ok++
			} else {
				wantErr(t, err, store.ErrIDUnavailable)
			}
		}
		if ok != 1 {
			t.Fatalf("message id %s appended %d times", mid, ok)
		}
	}
}

func TestListMessagesOrderFilterAndCursor(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	createThread(t, s, "t")
	createThread(t, s, "t-other")
	for i := range 7 {
		appendMessage(t, s, "t", fmt.Sprintf("m%d", 6-i), "x") // creation order, not ID order
		c.Advance(time.Second)
	}
	appendMessage(t, s, "t-other", "elsewhere", "x")
	deleteMessage(t, s, "t", "m3")

	list := func(o store.ListOptions) []string {
		t.Helper()
		var ids []string
		for {
			page, next, err := s.ListMessages(ctx, "t", o)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range page {
				ids = append(ids, m.ID)
			}
			if next == "" {
				return ids
			}
			o.Cursor = next
		}
	}
	if got := strings.Join(list(store.ListOptions{Limit: 2}), " "); got != "m6 m5 m4 m2 m1 m0" {
		t.Fatalf("live messages = %s", got)
	}
	if got := strings.Join(list(store.ListOptions{Limit: 3, IncludeDeleted: true}), " "); got != "m6 m5 m4 m3 m2 m1 m0" {
		t.Fatalf("all messages = %s", got)
	}
	page, next, err := s.ListMessages(ctx, "t", store.ListOptions{Limit: 6})
	if err != nil || len(page) != 6 || next != "" {
		t.Fatalf("exact page: %d messages, cursor %q, %v", len(page), next, err)
	}

	_, _, err = s.ListMessages(ctx, "t", store.ListOptions{Cursor: "garbage"})
	wantErr(t, err, store.ErrInvalidCursor)
	_, _, err = s.ListMessages(ctx, "missing", store.ListOptions{})
	wantErr(t, err, store.ErrNotFound)
}

func TestRestoreMessageAfterSeveralDeletes(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	createThread(t, s, "t")
	appendMessage(t, s, "t", "m", "one")
	deleteMessage(t, s, "t", "m")
	if _, err := s.RestoreMessage(ctx, "t", "m"); err != nil {
		t.Fatal(err)
	}
	deleteMessage(t, s, "t", "m")
	m, err := s.RestoreMessage(ctx, "t", "m")
	if err != nil || m.Deleted || m.Version != 5 || string(m.Body) != `{"text":"one"}` {
		t.Fatalf("second restore = %+v, %v", m, err)
	}
}

// TestConcurrentWritersOfOneThread: writers of one thread wait for
// durability outside the thread's lock, so their read-check-writes must
// still be atomic: every append is listed once and, per writer, in the
// order it was acknowledged; edits
// and deletes number versions without gaps; the indexes match a rebuild;
// and everything survives a reopen.
func TestConcurrentWritersOfOneThread(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := newClock()
	s, err := store.Open(dir, store.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	createThread(t, s, "hot")
	const writers, each = 16, 20
	acked := make([][]string, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := "" // half generated, half chosen by the client
				if i%2 == 0 {
					id = fmt.Sprintf("w%d-%d", w, i)
				}
				m, err := s.AppendMessage(ctx, "hot", store.Message{ID: id, Author: "a", Body: json.RawMessage(`1`)})
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
				c.Advance(time.Microsecond)
				if i%5 == 0 {
					if _, err := s.EditMessage(ctx, "hot", m.ID, json.RawMessage(`2`)); err != nil {
						t.Errorf("edit: %v", err)
					}
					if _, err := s.DeleteMessage(ctx, "hot", m.ID); err != nil {
						t.Errorf("delete: %v", err)
					}
				}
				acked[w] = append(acked[w], m.ID)
			}
		}()
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, dir, c)

	msgs, _, err := s.ListMessages(ctx, "hot", store.ListOptions{Limit: 1000, IncludeDeleted: true})
	if err != nil || len(msgs) != writers*each {
		t.Fatalf("listed %d messages, %v; want %d", len(msgs), err, writers*each)
	}
	pos := map[string]int{}
	for i, m := range msgs {
		pos[m.ID] = i
	}
	for w, ids := range acked {
		for i, id := range ids {
			p, ok := pos[id]
			if !ok {
				t.Fatalf("acknowledged message %s of writer %d lost", id, w)
			}
			if i > 0 && p < pos[ids[i-1]] {
				t.Fatalf("writer %d: %s listed before %s, acknowledged earlier", w, id, ids[i-1])
			}
			if m := msgs[p]; i%5 == 0 && (m.Version != 3 || !m.Deleted) {
				t.Fatalf("message %s: version %d deleted=%t, want 3 deleted", id, m.Version, m.Deleted)
			}
		}
	}
	if got := len(indexEntries(t, s, store.KindMessage)); got != writers*each/5 {
		t.Fatalf("deletion index holds %d messages, want %d", got, writers*each/5)
	}
	checkIndexesRebuildAlike(t, s)
}

// An append sent again with its client-chosen ID and the same content (a
// retry whose first answer was lost) answers as the first did and stores
// nothing; another author, body or thread is still refused.
func TestAppendSentAgainAnswersAsTheFirst(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	createThread(t, s, "a")
	createThread(t, s, "b")
	first := appendMessage(t, s, "a", "m", "hello")
	c.Advance(time.Second)

	again := appendMessage(t, s, "a", "m", "hello")
	if again.TS != first.TS || again.CreatedTS != first.CreatedTS || again.Version != 1 ||
		string(again.Body) != string(first.Body) || again.Author != first.Author {
		t.Fatalf("sent again = %+v, want the first %+v", again, first)
	}
	if versions, err := s.ListVersions(ctx, "a", "m"); err != nil || len(versions) != 1 {
		t.Fatalf("versions after sending again: %d, %v", len(versions), err)
	}
	for _, m := range []struct {
		tid    string
		author string
		body   string
	}{{"a", "ana", `{"text":"other"}`}, {"a", "bob", `{"text":"hello"}`}, {"b", "ana", `{"text":"hello"}`}} {
		_, err := s.AppendMessage(ctx, m.tid, store.Message{ID: "m", Author: m.author, Body: json.RawMessage(m.body)})
		wantErr(t, err, store.ErrIDUnavailable)
	}
}
