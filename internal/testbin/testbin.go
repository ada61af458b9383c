// Package testbin gives tests that run the module's commands as processes
// (progressdb, progressdb-dev-etcd) a built binary: the one `make test`
// built once for the whole run, or else one built on first use, once per
// test process. Linking the server takes seconds of CPU, and several
// packages and many tests need it.
//
// A package that uses it runs its tests through Main, which removes what
// was built:
//
//	func TestMain(m *testing.M) { testbin.Main(m) }
//
//	bin := testbin.Path(t, "progressdb")
package testbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// DirEnv names a folder holding the commands already built for this run:
// `make test` builds them there before the suite and sets it, so that no
// package links its own.
const DirEnv = "PROGRESSDB_TEST_BIN_DIR"

// module is the import path commands are built from: name is a folder of
// server/cmd.
const module = "github.com/progressdb/progressdb/server/cmd/"

// Version and Commit are the stamps test binaries are linked with, as
// the Makefile stamps a release (`make testbins` passes the same), so a
// test reads a stamped build's version without linking one of its own.
const (
	Version = "v0.0.0-test"
	Commit  = "7e57b1d5c0de"
)

// LDFlags are the linker flags that set Version and Commit.
const LDFlags = "-X github.com/progressdb/progressdb/server/internal/buildinfo.version=" + Version +
	" -X github.com/progressdb/progressdb/server/internal/buildinfo.commit=" + Commit

// built holds what this test process built, and the folder it is in.
var built struct {
	mu    sync.Mutex
	dir   string
	paths map[string]func() (string, error)
}

// Build returns the path of the command name ("progressdb",
// "progressdb-dev-etcd"), built without the race detector so that the
// processes under test run at production speed. Safe from parallel tests
// and from TestMain.
func Build(name string) (string, error) {
	if dir := os.Getenv(DirEnv); dir != "" {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("%s=%s: %w (make test builds it there; unset %s to build it here)", DirEnv, dir, err, DirEnv)
		}
		return path, nil
	}
	built.mu.Lock()
	if built.paths == nil {
		built.paths = make(map[string]func() (string, error))
	}
	once := built.paths[name]
	if once == nil {
		once = sync.OnceValues(func() (string, error) { return build(name) })
		built.paths[name] = once
	}
	built.mu.Unlock()
	return once()
}

// build links name into this process's folder, made on first use.
func build(name string) (string, error) {
	built.mu.Lock()
	if built.dir == "" {
		dir, err := os.MkdirTemp("", "progressdb-test-bin-")
		if err != nil {
			built.mu.Unlock()
			return "", err
		}
		built.dir = dir
	}
	out := filepath.Join(built.dir, name)
	built.mu.Unlock()
	cmd := exec.Command("go", "build", "-ldflags", LDFlags, "-o", out, module+name)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", errors.New("go build " + module + name + ": " + err.Error() + "\n" + string(msg))
	}
	return out, nil
}

// Path is Build for a test: it fails t when the command cannot be built.
func Path(t testing.TB, name string) string {
	t.Helper()
	path, err := Build(name)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Main runs the package's tests, removes what they built and exits with
// their status.
func Main(m *testing.M) {
	code := m.Run()
	Remove()
	os.Exit(code)
}

// Remove deletes what this process built; for a TestMain that cannot use
// Main.
func Remove() {
	built.mu.Lock()
	defer built.mu.Unlock()
	if built.dir != "" {
		os.RemoveAll(built.dir)
		built.dir, built.paths = "", nil
	}
}
