//go:build unix

package store_test

import (
	"bytes"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// Chat data is readable by the server's user only: the database folder is
// created 0700 and every file in it is 0600, even under a permissive umask.
func TestDatabaseFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)

	dir := filepath.Join(t.TempDir(), "nested", "db")
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	createThread(t, s, "t1")
	appendMessage(t, s, "t1", "m1", "secret")
	if err := s.DB().Flush(); err != nil { // an SSTable too
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		} else {
			files++
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", p, got, want)
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("walk: %v, %d files", err, files)
	}
}

// An existing folder others can read is used as it is, with a warning.
func TestOpenWarnsAboutAReadableFolder(t *testing.T) {
	for _, c := range []struct {
		mode fs.FileMode
		warn bool
	}{{0o755, true}, {0o750, true}, {0o700, false}} {
		dir := filepath.Join(t.TempDir(), "db")
		if err := os.Mkdir(dir, c.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, c.mode); err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		s, err := store.Open(dir, store.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		if got := strings.Contains(logs.String(), "db_folder_readable_by_others"); got != c.warn {
			t.Errorf("folder %v: warned %t, want %t: %s", c.mode, got, c.warn, logs.String())
		}
	}
}
