//go:build unix

package pebbledir_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/pebbledir"
)

// Every file and folder Open makes is the server user's only, whatever
// the umask, and a second open of a held folder is told apart.
func TestOpenIsPrivateAndLocked(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "nested", "db")
	db, err := pebbledir.Open(dir, pebbledir.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("k"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := pebbledir.Open(dir, pebbledir.Options{}); !pebbledir.IsLocked(err) {
		t.Fatalf("second open: %v, want a held lock", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(filepath.Dir(dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := pebbledir.FileMode
		if d.IsDir() {
			want = pebbledir.DirMode
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", p, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pebbledir.IsLocked(&fs.PathError{Op: "open", Path: "LOCK", Err: syscall.EACCES}) {
		t.Error("a lock file that cannot be created is not a held lock")
	}
}

// A checkpoint is a staging folder inside the database folder; names
// that would leave it are refused, only staging folders are removed, and
// RemoveStaleCheckpoints clears what a killed process left.
func TestCheckpointStaging(t *testing.T) {
	dir := t.TempDir()
	db, err := pebbledir.Open(dir, pebbledir.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, name := range []string{"", "a/b", `a\b`} {
		if _, err := pebbledir.Checkpoint(db, dir, name); !errors.Is(err, pebbledir.ErrCheckpointName) {
			t.Errorf("Checkpoint(%q) = %v, want ErrCheckpointName", name, err)
		}
	}
	if pebbledir.HasCheckpoints(dir) {
		t.Fatal("staging folder before any checkpoint")
	}
	a, err := pebbledir.Checkpoint(db, dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pebbledir.Checkpoint(db, dir, "b"); err != nil {
		t.Fatal(err)
	}
	if got, err := pebbledir.Checkpoints(dir); err != nil || len(got) != 2 {
		t.Fatalf("Checkpoints = %v, %v; want 2", got, err)
	}
	if err := pebbledir.RemoveCheckpoint(dir, dir); !errors.Is(err, pebbledir.ErrNotCheckpoint) {
		t.Fatalf("RemoveCheckpoint of the folder itself = %v, want ErrNotCheckpoint", err)
	}
	if err := pebbledir.RemoveCheckpoint(dir, a); err != nil {
		t.Fatal(err)
	}
	if err := pebbledir.RemoveStaleCheckpoints(dir); err != nil {
		t.Fatal(err)
	}
	if pebbledir.HasCheckpoints(dir) {
		t.Fatal("staging folder left")
	}
	if _, err := os.Stat(filepath.Join(dir, "LOCK")); err != nil {
		t.Fatalf("the database itself: %v", err)
	}
}
