package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// An append remembers that its thread is live (and does not read the
// thread again); every other write forgets it: appends after a delete, a
// purge and a record rewritten by a bulk load see the thread as it is.
func TestAppendSeesEveryChangeOfItsThread(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	createThread(t, s, "t1")
	body := json.RawMessage(`{"text":"hi"}`)
	add := func() error {
		_, err := s.AppendMessage(ctx, "t1", store.Message{Author: "ana", Body: body})
		return err
	}
	for range 3 { // the first reads the thread, the others remember it
		if err := add(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DeleteThread(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if err := add(); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("append to a deleted thread: %v, want ErrNotFound", err)
	}
	if _, err := s.RestoreThread(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if err := add(); err != nil {
		t.Fatalf("append to a restored thread: %v", err)
	}
	if err := add(); err != nil {
		t.Fatal(err)
	}

	// A bulk load rewriting the record (here, into one that cannot be
	// read) is seen by the next append.
	b := s.NewBulk()
	if err := b.PutRaw([]byte("thread:t1:meta"), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := add(); !errors.Is(err, store.ErrMalformed) {
		t.Fatalf("append to a thread whose record is malformed: %v, want ErrMalformed", err)
	}

	createThread(t, s, "t2")
	for range 2 {
		if _, err := s.AppendMessage(ctx, "t2", store.Message{Author: "ana", Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DeleteThread(ctx, "t2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PurgeThread(ctx, "t2", store.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendMessage(ctx, "t2", store.Message{Author: "ana", Body: body}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("append to a purged thread: %v, want ErrNotFound", err)
	}
}

// Appenders race a delete of their thread: once DeleteThread has returned,
// no append that starts afterwards succeeds, however many appends
// remembered the thread as live before.
func TestNoAppendAfterDeleteReturns(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	createThread(t, s, "t1")
	body := json.RawMessage(`{"text":"hi"}`)
	var (
		deleted atomic.Bool
		wg      sync.WaitGroup
		errs    = make(chan error, 8)
		started = make(chan struct{}, 8)
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				after := deleted.Load()
				_, err := s.AppendMessage(ctx, "t1", store.Message{Author: "ana", Body: body})
				if i == 0 {
					started <- struct{}{}
				}
				switch {
				case err == nil && after:
					errs <- fmt.Errorf("writer %d: an append started after the delete returned succeeded", w)
					return
				case errors.Is(err, store.ErrNotFound):
					return
				case err != nil:
					errs <- err
					return
				}
			}
		}()
	}
	for range 8 {
		<-started // every writer has appended (and remembered the thread) once
	}
	if _, err := s.DeleteThread(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	deleted.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
