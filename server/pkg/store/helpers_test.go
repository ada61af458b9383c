package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// clock is an injectable clock for tests.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock {
	return &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// openStore opens a store in a fresh directory, closed when the test ends.
func openStore(t testing.TB, c *clock) *store.Store {
	t.Helper()
	return openAt(t, t.TempDir(), c)
}

func openAt(t testing.TB, dir string, c *clock) *store.Store {
	t.Helper()
	s, err := store.Open(dir, store.Options{Now: c.Now})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return s
}

func createThread(t testing.TB, s *store.Store, id string) store.Thread {
	t.Helper()
	th, err := s.CreateThread(context.Background(), store.Thread{ID: id, Title: "title " + id, Author: "ana"})
	if err != nil {
		t.Fatalf("create thread %q: %v", id, err)
	}
	return th
}

func appendMessage(t testing.TB, s *store.Store, tid, mid, text string) store.Message {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"text": text})
	m, err := s.AppendMessage(context.Background(), tid, store.Message{ID: mid, Author: "ana", Body: body})
	if err != nil {
		t.Fatalf("append message %q to %q: %v", mid, tid, err)
	}
	return m
}

func deleteThread(t testing.TB, s *store.Store, tid string) store.Thread {
	t.Helper()
	th, err := s.DeleteThread(context.Background(), tid)
	if err != nil {
		t.Fatalf("delete thread %q: %v", tid, err)
	}
	return th
}

func deleteMessage(t testing.TB, s *store.Store, tid, mid string) store.Message {
	t.Helper()
	m, err := s.DeleteMessage(context.Background(), tid, mid)
	if err != nil {
		t.Fatalf("delete message %q: %v", mid, err)
	}
	return m
}

// rawKeys returns every key/value in [lower, upper) (all keys when both
// are empty), straight from Pebble.
func rawKeys(t testing.TB, s *store.Store, lower, upper string) map[string]string {
	t.Helper()
	o := &pebble.IterOptions{}
	if lower != "" {
		o.LowerBound = []byte(lower)
	}
	if upper != "" {
		o.UpperBound = []byte(upper)
	}
	it, err := s.DB().NewIter(o)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return out
}

// indexEntries lists the deletion index of kind as "ts:id" strings.
func indexEntries(t testing.TB, s *store.Store, kind store.ItemKind) []store.DeletionEntry {
	t.Helper()
	var out []store.DeletionEntry
	err := s.ScanDeletionIndex(context.Background(), kind, 0, 1<<63-1, func(e store.DeletionEntry) error {
		out = append(out, e)
		return nil
	})
	if err != nil {
		t.Fatalf("scan deletion index: %v", err)
	}
	return out
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want %v", err, target)
	}
}
