package durable_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/durable"
)

// WriteFile replaces a file whole; WriteNew refuses to; a failed fill
// leaves the old file and no temporary one.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := durable.WriteFile(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := durable.WriteFile(p, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := durable.WriteNew(p, 0o600, func(w io.Writer) error { _, err := w.Write([]byte("three")); return err })
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("WriteNew over a file = %v, want fs.ErrExist", err)
	}
	boom := errors.New("boom")
	if err := durable.Write(p, 0o600, func(io.Writer) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed fill = %v, want boom", err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "two" {
		t.Fatalf("file = %q, %v; want two", b, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("folder holds %d entries, want the file alone", len(entries))
	}
	if err := durable.WriteNew(filepath.Join(dir, "g"), 0o600, func(w io.Writer) error { _, err := w.Write([]byte("g")); return err }); err != nil {
		t.Fatal(err)
	}
	if err := durable.SyncDir(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("SyncDir of a missing folder succeeded")
	}
}
