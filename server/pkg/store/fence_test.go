package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// TestFenceRefusesOlderEpoch: once a write with epoch 7 is committed, every
// write with an older epoch is refused, user writes and purges alike, and
// leaves nothing behind; the newest epoch survives a restart.
func TestFenceRefusesOlderEpoch(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	s := openAt(t, dir, clk)
	bg := context.Background()
	old, cur := store.WithEpoch(bg, 5), store.WithEpoch(bg, 7)
	if got := s.Epoch(); got != 0 {
		t.Fatalf("Epoch of a new database = %d, want 0", got)
	}

	if _, err := s.CreateThread(old, store.Thread{ID: "t1", Title: "x", Author: "ana"}); err != nil {
		t.Fatal(err)
	}
	if got := s.Epoch(); got != 5 {
		t.Fatalf("Epoch = %d, want 5", got)
	}
	// The new owner's first write raises the fence.
	if _, err := s.CreateThread(cur, store.Thread{ID: "t2", Title: "x", Author: "ana"}); err != nil {
		t.Fatal(err)
	}
	if got := s.Epoch(); got != 7 {
		t.Fatalf("Epoch = %d, want 7", got)
	}

	body, _ := json.Marshal("late")
	_, err := s.AppendMessage(old, "t1", store.Message{ID: "m-late", Author: "ana", Body: body})
	wantErr(t, err, store.ErrFenced)
	if _, err := s.GetMessage(bg, "t1", "m-late"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused message is there: %v", err)
	}
	_, err = s.DeleteThread(old, "t1")
	wantErr(t, err, store.ErrFenced)
	if th, _ := s.GetThread(bg, "t1"); th.Deleted {
		t.Fatal("refused delete applied")
	}

	// The deposed owner's purge: its marker and its delete batches.
	deleteThread(t, s, "t1")
	clk.Advance(1)
	th, _ := s.GetThread(bg, "t1")
	err = s.BeginPurge(old, store.PurgeMarker{Kind: store.KindThread, ID: "t1", DeletedTS: th.DeletedTS, RunID: "r1"})
	wantErr(t, err, store.ErrFenced)
	_, err = s.PurgeThread(old, "t1", store.PurgeOptions{})
	wantErr(t, err, store.ErrFenced)
	if _, err := s.GetThread(bg, "t1"); err != nil {
		t.Fatalf("refused purge deleted the thread: %v", err)
	}

	// Writes without an epoch (a single node, tools) are not checked, and
	// the current owner's go on.
	appendMessage(t, s, "t2", "m1", "hello")
	if _, err := s.AppendMessage(cur, "t2", store.Message{ID: "m2", Author: "ana", Body: body}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PurgeThread(cur, "t1", store.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, dir, clk)
	if got := s.Epoch(); got != 7 {
		t.Fatalf("Epoch after reopen = %d, want 7", got)
	}
	_, err = s.AppendMessage(old, "t2", store.Message{ID: "m3", Author: "ana", Body: body})
	wantErr(t, err, store.ErrFenced)
}

// TestFenceRaiseOrdersWrites: old-epoch writers race a raise; once the
// raise has returned, no old-epoch write is accepted, and every old-epoch
// write that was accepted is in the database.
func TestFenceRaiseOrdersWrites(t *testing.T) {
	s := openStore(t, newClock())
	bg := context.Background()
	createThread(t, s, "t")
	old := store.WithEpoch(bg, 1)
	if _, err := s.CreateThread(old, store.Thread{ID: "o", Title: "x", Author: "ana"}); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal("x")

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		accepted []string
		raised   = make(chan struct{})
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				after := false
				select {
				case <-raised:
					after = true
				default:
				}
				m, err := s.AppendMessage(old, "t", store.Message{Author: "ana", Body: body})
				if errors.Is(err, store.ErrFenced) {
					return
				}
				if after {
					t.Errorf("writer %d: old-epoch write begun after the raise returned was accepted (%v)", w, err)
					return
				}
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				mu.Lock()
				accepted = append(accepted, m.ID)
				mu.Unlock()
			}
		}()
	}
	if _, err := s.CreateThread(store.WithEpoch(bg, 2), store.Thread{ID: "n", Title: "x", Author: "ana"}); err != nil {
		t.Fatal(err)
	}
	close(raised)
	wg.Wait()
	for _, id := range accepted {
		if _, err := s.GetMessage(bg, "t", id); err != nil {
			t.Fatalf("accepted write %s is missing: %v", id, err)
		}
	}
}

// TestRaiseFenceWithoutWrite: a raise alone fences the older epoch, with
// no data written, survives a restart, and is refused below the newest.
func TestRaiseFenceWithoutWrite(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	s := openAt(t, dir, clk)
	bg := context.Background()
	if _, err := s.CreateThread(store.WithEpoch(bg, 5), store.Thread{ID: "t1", Title: "x", Author: "ana"}); err != nil {
		t.Fatal(err)
	}
	if err := s.RaiseFence(bg, 9); err != nil {
		t.Fatal(err)
	}
	if got := s.Epoch(); got != 9 {
		t.Fatalf("Epoch = %d, want 9", got)
	}
	_, err := s.CreateThread(store.WithEpoch(bg, 5), store.Thread{ID: "t2", Title: "x", Author: "ana"})
	wantErr(t, err, store.ErrFenced)
	if _, err := s.GetThread(bg, "t2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused thread is there: %v", err)
	}
	wantErr(t, s.RaiseFence(bg, 8), store.ErrFenced)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, dir, clk)
	if got := s.Epoch(); got != 9 {
		t.Fatalf("Epoch after reopening = %d, want 9", got)
	}
}

// TestFenceRefusesOldRunRecords: a deposed owner's retention run cannot
// record that it began purging, nor claim a replayed purge: either would
// tell the next run that purges are in the database that never were.
func TestFenceRefusesOldRunRecords(t *testing.T) {
	s := openStore(t, newClock())
	bg := context.Background()
	createThread(t, s, "t1")
	deleteThread(t, s, "t1")
	if err := s.RaiseFence(bg, 7); err != nil {
		t.Fatal(err)
	}
	old := store.WithEpoch(bg, 5)

	wantErr(t, s.SetRunStarted(old, "r-old"), store.ErrFenced)
	if got, err := s.RunStarted(bg); err != nil || got != "" {
		t.Fatalf("RunStarted = %q, %v; want none", got, err)
	}
	_, err := s.BeginReplayPurge(old, store.PurgeMarker{Kind: store.KindThread, ID: "t1", RunID: "r-old"})
	wantErr(t, err, store.ErrFenced)
	if ms, err := s.PendingPurges(bg); err != nil || len(ms) != 0 {
		t.Fatalf("purge markers = %v, %v; want none", ms, err)
	}
}

// TestUnfencedWrites: the writes commit.go lets skip the fence land with
// any token and raise none: the retention pause switch, the erase record,
// and the log-only writes (Sync, Check).
func TestUnfencedWrites(t *testing.T) {
	s := openStore(t, newClock())
	bg := context.Background()
	if err := s.RaiseFence(bg, 7); err != nil {
		t.Fatal(err)
	}
	for _, ctx := range []context.Context{store.WithEpoch(bg, 5), store.WithEpoch(bg, 9)} {
		if _, err := s.SetRetentionPause(ctx, true, "audit"); err != nil {
			t.Fatalf("pause: %v", err)
		}
		if err := s.OweErase(ctx); err != nil {
			t.Fatalf("owe erase: %v", err)
		}
		if _, err := s.Erase(ctx, &store.EraseSpans{}, store.EraseOptions{}); err != nil {
			t.Fatalf("erase: %v", err)
		}
		if err := s.Sync(ctx); err != nil {
			t.Fatalf("sync: %v", err)
		}
		if err := s.Check(ctx); err != nil {
			t.Fatalf("check: %v", err)
		}
		if got := s.Epoch(); got != 7 {
			t.Fatalf("Epoch = %d after unfenced writes, want 7", got)
		}
	}
	if p, err := s.RetentionPause(bg); err != nil || !p.Paused {
		t.Fatalf("pause = %+v, %v; want paused", p, err)
	}
	if ok, err := s.Erased(bg); err != nil || !ok {
		t.Fatalf("Erased = %v, %v; want true", ok, err)
	}
}
