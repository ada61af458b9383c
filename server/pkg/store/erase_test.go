package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// A new database has nothing purged to erase; once a purge is owed, the
// next Erase covers the whole key space, and records it is done.
func TestEraseStateAndFullErase(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")
	s := openAt(t, dir, newClock())
	if ok, err := s.Erased(ctx); err != nil || !ok {
		t.Fatalf("new database: Erased = %v, %v; want true", ok, err)
	}
	createThread(t, s, "t1")
	appendMessage(t, s, "t1", "m1", "EraseStateBodyZ3")
	deleteThread(t, s, "t1")
	if err := s.OweErase(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PurgeThread(ctx, "t1", store.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	storetest.RequireAll(t, dir, "EraseStateBodyZ3")
	if ok, _ := s.Erased(ctx); ok {
		t.Fatal("Erased after an owed purge")
	}
	res, err := s.Erase(ctx, nil, store.EraseOptions{Full: true})
	if err != nil || !res.Full || res.Ranges != 1 {
		t.Fatalf("Erase = %+v, %v; want a full erase", res, err)
	}
	storetest.RequireNone(t, dir, "EraseStateBodyZ3")
	if ok, err := s.Erased(ctx); err != nil || !ok {
		t.Fatalf("after Erase: Erased = %v, %v", ok, err)
	}
}

// A backup's staging checkpoint taken before a purge holds the purged
// content under the database folder (its copied log, its links to
// replaced tables): an erase that ends while one is there fails instead
// of recording the database erased, and succeeds once it is removed.
func TestEraseWaitsForStagingCheckpoints(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")
	s, err := store.Open(dir, store.Options{EraseWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	createThread(t, s, "t1")
	appendMessage(t, s, "t1", "m1", "StagedBodyQ8")
	deleteThread(t, s, "t1")
	staging, err := s.Checkpoint(ctx, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.OweErase(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PurgeThread(ctx, "t1", store.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Erase(ctx, nil, store.EraseOptions{Full: true}); !errors.Is(err, store.ErrEraseIncomplete) {
		t.Fatalf("Erase with a staging checkpoint in the folder: %v, want ErrEraseIncomplete", err)
	}
	if ok, _ := s.Erased(ctx); ok {
		t.Fatal("recorded erased while the staging checkpoint holds the purged content")
	}
	storetest.RequireAll(t, staging, "StagedBodyQ8")
	if err := s.RemoveCheckpoint(staging); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Erase(ctx, nil, store.EraseOptions{Full: true}); err != nil {
		t.Fatalf("Erase once the checkpoint is removed: %v", err)
	}
	storetest.RequireNone(t, dir, "StagedBodyQ8")
}
