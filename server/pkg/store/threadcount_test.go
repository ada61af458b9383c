package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// CountThreads splits threads by their record, sealed or plain, deleted
// ones included, skipping every message key; after a sealing pass has
// sealed some of them, the counts move from plain to sealed, and a count
// after an ID leaves out the threads up to it.
func TestCountThreads(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	dir := t.TempDir()
	plain, err := store.Open(filepath.Join(dir, "data"), store.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		tid := fmt.Sprintf("t%d", i)
		if _, err := plain.CreateThread(ctx, store.Thread{ID: tid, Title: "x", Author: "ana"}); err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			if _, err := plain.AppendMessage(ctx, tid, store.Message{ID: fmt.Sprintf("%s-m%d", tid, j), Author: "ana", Body: json.RawMessage(`"hi"`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := plain.DeleteThread(ctx, "t4"); err != nil {
		t.Fatal(err)
	}
	if got, err := plain.CountThreads(ctx, ""); err != nil || got != (store.ThreadCounts{Plain: 5}) {
		t.Fatalf("plain database: %+v %v, want 5 plain", got, err)
	}
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}

	s := sealedStore(t, dir, c)
	defer s.Close()
	if _, err := s.CreateThread(ctx, store.Thread{ID: "t9", Title: "y", Author: "bo"}); err != nil {
		t.Fatal(err)
	}
	for _, tid := range []string{"t0", "t1"} {
		if _, done, err := s.SealThread(ctx, tid, "", 100); err != nil || !done {
			t.Fatalf("seal %s: done %t, %v", tid, done, err)
		}
	}
	if got, err := s.CountThreads(ctx, ""); err != nil || got != (store.ThreadCounts{Sealed: 3, Plain: 3}) || got.Total() != 6 {
		t.Fatalf("after sealing t0 and t1: %+v %v, want 3 sealed (t0, t1, t9) and 3 plain", got, err)
	}
	if got, err := s.CountThreads(ctx, "t1"); err != nil || got != (store.ThreadCounts{Sealed: 1, Plain: 3}) {
		t.Fatalf("after t1: %+v %v, want t2, t3, t4 plain and t9 sealed", got, err)
	}
}
