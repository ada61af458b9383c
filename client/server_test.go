package client_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/progressdb/progressdb/internal/testbin"
)

// binary is the progressdb binary TestMain gets from testbin (without the
// race detector, so that the server under test runs at its own speed).
var binary string

func TestMain(m *testing.M) {
	var err error
	code := 1
	if binary, err = testbin.Build("progressdb"); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	testbin.Remove()
	os.Exit(code)
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

const (
	apiKey     = "key-1"
	adminToken = "admin-1"
)

// serve starts `progressdb serve` on a free loopback port with a database
// in a temporary folder, the API key, the admin token and a backup
// folder, and env (KEY=VALUE, overriding), waits until /healthz answers
// and stops it with SIGTERM when the test ends. It returns the base URL.
func serve(t testing.TB, env ...string) string {
	t.Helper()
	return start(t, "http", http.DefaultClient, env)
}

// start is serve with the scheme the server answers on and the HTTP client
// that can ask its /healthz.
func start(t testing.TB, scheme string, hc *http.Client, env []string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cmd := exec.Command(binary, "serve")
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"PROGRESSDB_ADDR=" + addr,
		"PROGRESSDB_DB_PATH=" + filepath.Join(dir, "db"),
		"PROGRESSDB_BACKUP_PATH=" + filepath.Join(dir, "backups"),
		"PROGRESSDB_API_KEY=" + apiKey,
		"PROGRESSDB_ADMIN_TOKEN=" + adminToken,
		"PROGRESSDB_LOG_LEVEL=warn",
	}, env...)
	var logs lockedBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			if waitErr != nil {
				t.Errorf("serve: %v\n%s", waitErr, logs.String())
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Errorf("serve did not stop on SIGTERM\n%s", logs.String())
		}
	})
	base := scheme + "://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; {
		res, err := hc.Get(base + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return base
			}
		}
		select {
		case <-exited:
			t.Fatalf("serve exited before answering: %v\n%s", waitErr, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve at %s did not answer /healthz: %v\n%s", addr, err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
