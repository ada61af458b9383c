//go:build unix

package audit

import (
	"path/filepath"
	"syscall"
	"testing"
)

// A restrictive umask must not narrow the modes: they are set explicitly.
func TestModesIgnoreUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)

	root := filepath.Join(t.TempDir(), "audit")
	w, err := Create(root, "r", testHeader())
	if err != nil {
		t.Fatal(err)
	}
	assertMode(t, root, dirMode)
	assertMode(t, filepath.Join(root, "2025-03"), dirMode)
	assertMode(t, w.Path(), fileMode)
	path, err := w.Close(Footer{Status: RunCompleted})
	if err != nil {
		t.Fatal(err)
	}
	assertMode(t, path, fileMode)
}
