package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Without DirEnv a command is built on first use, once per process, even
// when parallel tests ask for it at once; Remove deletes it.
func TestBuildsOncePerProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("links a command")
	}
	t.Setenv(DirEnv, "")
	t.Cleanup(Remove)
	paths := make([]string, 4)
	var wg sync.WaitGroup
	for i := range paths {
		wg.Go(func() { paths[i] = Path(t, "progressdb-dev-etcd") })
	}
	wg.Wait()
	first, err := os.Stat(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths[1:] {
		if p != paths[0] {
			t.Fatalf("paths %v: want one binary", paths)
		}
	}
	if out, err := exec.Command(paths[0], "-h").CombinedOutput(); err != nil && !strings.Contains(string(out), "Usage") {
		t.Fatalf("the built binary does not run: %v\n%s", err, out)
	}
	if again := Path(t, "progressdb-dev-etcd"); again != paths[0] {
		t.Fatalf("second call: %s, want %s", again, paths[0])
	}
	if st, err := os.Stat(paths[0]); err != nil || !st.ModTime().Equal(first.ModTime()) {
		t.Fatalf("the binary was built again (%v)", err)
	}
	Remove()
	if _, err := os.Stat(paths[0]); !os.IsNotExist(err) {
		t.Fatalf("Remove left %s (%v)", paths[0], err)
	}
}

// With DirEnv set (make test) the folder's binary is used as is, and a
// missing one is an error naming the variable, not a silent build.
func TestUsesTheRunsFolder(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "progressdb")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(DirEnv, dir)
	if got, err := Build("progressdb"); err != nil || got != bin {
		t.Fatalf("Build: %q, %v; want %q", got, err, bin)
	}
	_, err := Build("progressdb-dev-etcd")
	if err == nil || !strings.Contains(err.Error(), DirEnv+"="+dir) {
		t.Fatalf("a command missing from %s: %v; want an error naming it", DirEnv, err)
	}
}
