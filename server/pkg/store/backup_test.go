package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// A folder a restore left unfinished is refused, not opened as a (new,
// empty) database.
func TestOpenRefusesUnfinishedRestore(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, store.RestoreMarker), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir, store.Options{})
	if !errors.Is(err, store.ErrRestoreUnfinished) {
		if st != nil {
			st.Close()
		}
		t.Fatalf("open: %v, want ErrRestoreUnfinished", err)
	}
}

// A checkpoint is a database of its own with what was acknowledged, and
// Inspect counts it; the staging folder goes with RemoveCheckpoint.
func TestCheckpointInspect(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateThread(ctx, store.Thread{ID: "t", Title: "x", Author: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AppendMessage(ctx, "t", store.Message{ID: "m", Author: "a", Body: []byte(`"hi"`)}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetAuditHead(ctx, store.AuditHead{RunID: "r1", File: "2026-11/x.jsonl", SHA256: "ab"}); err != nil {
		t.Fatal(err)
	}
	dir, err := st.Checkpoint(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	stats, err := store.Inspect(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Threads != 1 || stats.Messages != 1 || !stats.HasHead || stats.Head.RunID != "r1" {
		t.Fatalf("stats %+v", stats)
	}
	if err := st.RemoveCheckpoint(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("staging folder still there: %v", err)
	}
	if err := st.RemoveCheckpoint(t.TempDir()); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("removing a folder that is no checkpoint: %v", err)
	}
	if _, err := store.Inspect(ctx, t.TempDir()); err == nil {
		t.Fatal("Inspect of an empty folder succeeded")
	}
}
