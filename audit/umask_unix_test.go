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

// A FIFO named like an audit file is reported, never opened: opening it
// for reading would block until a writer came.
func TestVerifyDoesNotOpenAFIFO(t *testing.T) {
	root := t.TempDir()
	writeRun(t, root, "a")
	fifo := filepath.Join(root, "2025-03", "retention-20250301T030000Z-f.jsonl")
	if err := syscall.Mkfifo(fifo, 0o640); err != nil {
		t.Fatal(err)
	}
	done := make(chan Report, 1)
	go func() {
		rep, _ := VerifyDir(root)
		done <- rep
	}()
	rep := <-done // a hang fails the test by its timeout
	hasProblem(t, rep, fifo, "not a regular file")
	if _, err := Open(fifo); err == nil {
		t.Error("Open of a FIFO succeeded")
	}
}
