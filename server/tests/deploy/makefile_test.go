package deploy

import (
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/progressdb/progressdb/internal/testbin"
	"github.com/progressdb/progressdb/server/internal/testtools"
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
	makeTool := testtools.Need(t, "make", "Debian package make")
	root := repoRoot(t)
	tmp := t.TempDir()
	bin := testbin.Path(t, "progressdb")
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

// freePorts returns n consecutive loopback ports nothing listens on now.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		base := freePort(t)
		ok := true
		for p := base + 1; p < base+n && ok; p++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

// scripts/cluster-demo.sh (make cluster-demo) starts etcd and three nodes,
// writes through one node and reads back through the others, and stops
// and removes everything it started; with CLUSTER_DEMO_TLS=1 and
// CLUSTER_DEMO_SEALED=1 too, and with CLUSTER_DEMO_REPLICAS=3.
func TestClusterDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries and runs three nodes")
	}
	testtools.Need(t, "curl", "Debian package curl")
	root := repoRoot(t)
	tmp := t.TempDir()
	bins := map[string]string{"progressdb": "", "progressdb-dev-etcd": ""}
	for name := range bins {
		bins[name] = testbin.Path(t, name)
	}
	// Plain, then with mutual TLS (CLUSTER_DEMO_TLS=1), whose run also
	// shows a call without a node certificate refused, and sealed
	// (CLUSTER_DEMO_SEALED=1): no content in clear in any node's files;
	// then plain with three replicas per shard, whose threads stay
	// writable and readable with a node stopped.
	for _, mode := range []struct{ tls, replicas string }{{"", ""}, {"1", ""}, {"", "3"}} {
		if mode.tls != "" {
			testtools.Need(t, "openssl", "Debian package openssl")
		}
		cmd := exec.Command(filepath.Join(root, "scripts", "cluster-demo.sh"), bins["progressdb"], bins["progressdb-dev-etcd"])
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "CLUSTER_DEMO_TLS="+mode.tls, "CLUSTER_DEMO_SEALED="+mode.tls,
			"CLUSTER_DEMO_REPLICAS="+mode.replicas,
			"CLUSTER_DEMO_PORT="+strconv.Itoa(freePorts(t, 4)), "CLUSTER_DEMO_ETCD_PORT="+strconv.Itoa(freePorts(t, 2)))
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "cluster-demo: ok") ||
			!strings.Contains(string(out), "node-3: all six messages read back") ||
			(mode.tls != "") != strings.Contains(string(out), "without a certificate: 403") ||
			(mode.tls != "") != strings.Contains(string(out), "no 'hello from' or 'thread alpha' in any file") ||
			(mode.replicas != "") != strings.Contains(string(out), "with node-3 down: a message written to each of the six threads") {
			t.Fatalf("CLUSTER_DEMO_TLS=%q CLUSTER_DEMO_REPLICAS=%q cluster-demo.sh: %v\n%s", mode.tls, mode.replicas, err, out)
		}
		left, err := filepath.Glob(filepath.Join(tmp, "progressdb-cluster-demo.*"))
		if err != nil || len(left) > 0 {
			t.Errorf("the demo left %v behind (%v)", left, err)
		}
	}
}

// The progressdb binary carries no etcd server: only tests and the
// development command progressdb-dev-etcd embed one.
func TestProductBinaryCarriesNoEtcdServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/progressdb/progressdb/server/cmd/progressdb").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "go.etcd.io/etcd/server/") {
			t.Fatalf("the progressdb binary links %s", pkg)
		}
	}
}
