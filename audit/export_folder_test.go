package audit

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestCheckExportFolder(t *testing.T) {
	base := t.TempDir()
	db := filepath.Join(base, "db")
	mk := func(p string) string {
		if err := os.MkdirAll(p, 0o750); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mk(db)
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(base, "fifo")
	if err := syscall.Mkfifo(fifo, 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(mk(filepath.Join(base, "elsewhere")), link); err != nil {
		t.Fatal(err)
	}
	parentLink := filepath.Join(base, "parent")
	if err := os.Symlink(db, parentLink); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, root string
		ok         bool
	}{
		{"folder", mk(filepath.Join(base, "exports")), true},
		{"absent", filepath.Join(base, "new", "exports"), true},
		{"file", file, false},
		{"fifo", fifo, false},
		{"link", link, false},
		{"inside the database", mk(filepath.Join(db, "exports")), false},
		{"inside the database through a link", filepath.Join(parentLink, "exports"), false},
	} {
		err := CheckExportFolder(c.root, db)
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, ErrExportFolder)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
