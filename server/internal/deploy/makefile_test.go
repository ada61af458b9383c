package deploy

import (
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitUntil polls cond until it holds or the bound passes. The bound only
// stops a broken build from hanging the suite; nothing is asserted on speed.
func waitUntil(bound time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(bound); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// `make run &` then `kill <make's pid>`: GNU make passes SIGTERM on to its
// child only, so the recipe must exec the server (not leave a shell in
// between that dies and orphans it, holding the port and the database
// lock). The Makefile's own run recipe is used, with a binary built here
// (-o build: make does not rebuild it).
func TestMakeRunStopsTheServerWhenMakeIsKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs make")
	}
	makeTool, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make")
	}
	root := repoRoot(t)
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "progressdb")
	build := exec.Command("go", "build", "-o", bin, "github.com/progressdb/progressdb/server/cmd/progressdb")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The recipe runs ./$(BIN) from the repository: BIN is relative to it.
	relBin, err := filepath.Rel(root, bin)
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(tmp, "data")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))

	cmd := exec.Command(makeTool, "--no-print-directory", "-C", root, "-o", "build", "run", "BIN="+relBin)
	cmd.Env = append(os.Environ(), "PROGRESSDB_DB_PATH="+db, "PROGRESSDB_ADDR="+addr, "PROGRESSDB_LOG_LEVEL=warn")
	// Its own process group: the cleanup can stop whatever make left.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	client := &http.Client{Timeout: 2 * time.Second}
	healthy := waitUntil(2*time.Minute, func() bool {
		res, err := client.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	if !healthy {
		t.Fatal("make run: the server never answered /healthz")
	}

	// Only make is signalled, as `kill $!` after `make run &` does.
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-waited

	portFreed := waitUntil(time.Minute, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	if !portFreed {
		t.Fatalf("make was killed but the server still listens on %s (orphaned)", addr)
	}
	var st *store.Store
	lockFreed := waitUntil(time.Minute, func() bool {
		st, err = store.Open(db, store.Options{})
		return !errors.Is(err, store.ErrDatabaseLocked)
	})
	if !lockFreed {
		t.Fatalf("make was killed but the database lock is still held: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}
