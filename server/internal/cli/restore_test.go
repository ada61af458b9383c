package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// restore refuses, exit 2 and touching nothing, a folder that is not
// empty and an audit trail inside the folder; an archive that does not
// verify exits 1 and leaves the folder as it was.
func TestRestoreRefusals(t *testing.T) {
	h := newHarness(t)
	h.createDB()
	archive := filepath.Join(t.TempDir(), "b.tar")
	h.mustRun("backup", "create", "--out", archive)

	full := t.TempDir()
	keep := filepath.Join(full, "keep.txt")
	if err := os.WriteFile(keep, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := h.run("restore", archive, "--db", full); code != exitUsage || !strings.Contains(errOut, "not empty") {
		t.Fatalf("restore into a non-empty folder: exit %d, want 2\n%s", code, errOut)
	}
	if data, err := os.ReadFile(keep); err != nil || string(data) != "mine" {
		t.Fatalf("the folder's file changed: %q %v", data, err)
	}
	if entries, _ := os.ReadDir(full); len(entries) != 1 {
		t.Fatalf("the folder holds %d entries, want its one file", len(entries))
	}

	dir := filepath.Join(t.TempDir(), "restored")
	code, _, errOut := h.run("restore", archive, "--db", dir, "--audit", filepath.Join(dir, "audit"))
	if code != exitUsage || !strings.Contains(errOut, "inside") {
		t.Fatalf("restore with the trail inside the folder: exit %d, want 2\n%s", code, errOut)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the refused restore made %s", dir)
	}

	bad := filepath.Join(t.TempDir(), "bad.tar")
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, data[:len(data)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = h.run("restore", bad, "--db", dir)
	if code != exitFailed || !strings.Contains(errOut, "does not verify") {
		t.Fatalf("restore of a cut archive: exit %d, want 1\n%s", code, errOut)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a restore that did not verify left %s (%v)", dir, err)
	}
}
