//go:build unix

package keystore_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/erase"
	"github.com/progressdb/progressdb/server/pkg/keystore"
)

// The key store's files hold the data keys (wrapped) that open the
// content: they are the server user's only, as the database's are: the
// folder 0700 and every file 0600, even under a permissive umask.
func TestKeyStoreFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)

	dir := filepath.Join(t.TempDir(), "nested", "keys")
	ks, err := keystore.Open(context.Background(), dir, keystore.Options{Keeper: keeper(t, 1), DataPath: filepath.Join(t.TempDir(), "data")})
	if err != nil {
		t.Fatal(err)
	}
	seal(t, ks, "t1", "ann", "hello")
	if _, err := ks.Erase(context.Background(), erase.Options{}); err != nil { // flushes: a table too
		t.Fatal(err)
	}
	if err := ks.Close(); err != nil {
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
