package faults

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/internal/testbin"
)

// devEtcdBinary is progressdb-dev-etcd, for the tests that kill and
// restart etcd as a process of its own.
func devEtcdBinary() (string, error) { return testbin.Build("progressdb-dev-etcd") }

// etcdProc is a single-member etcd run as a process
// (progressdb-dev-etcd), on a data folder and ports it keeps across
// restarts.
type etcdProc struct {
	dir, client, peer string
	p                 *proc
}

// startEtcd starts an etcd process on free loopback ports.
func startEtcd(t testing.TB) *etcdProc {
	t.Helper()
	e := &etcdProc{dir: filepath.Join(t.TempDir(), "etcd"), client: freeAddr(t), peer: freeAddr(t)}
	e.start(t)
	return e
}

func (e *etcdProc) start(t testing.TB) {
	t.Helper()
	bin, err := devEtcdBinary()
	if err != nil {
		t.Fatalf("build progressdb-dev-etcd: %v", err)
	}
	e.p = startCommand(t, envVars{}, []string{bin, "--dir", e.dir, "--listen", e.client, "--peer", e.peer})
	waitFor(t, time.Minute, "etcd to be ready", func() bool {
		if e.p.exited() {
			t.Fatalf("etcd exited with status %d\n%s", e.p.code, e.p.output())
		}
		return strings.Contains(e.p.output(), "etcd ready")
	})
}

func (e *etcdProc) endpoints() string { return "http://" + e.client }

// kill stops etcd with SIGKILL: every node loses it at once, as when
// quorum is lost.
func (e *etcdProc) kill() { e.p.kill() }
