package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer collects a server's log lines written from many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startServer runs `progressdb serve` in this process on a free loopback
// port with its own environment, waits until /healthz answers, and stops
// it when the test ends. It returns the address.
func startServer(t *testing.T, environ []string) string {
	t.Helper()
	addr, _ := startServerWithLogs(t, environ)
	return addr
}

// startServerLogs starts a server and returns a function reading its logs.
func startServerLogs(t *testing.T, environ []string) func() string {
	t.Helper()
	_, logs := startServerWithLogs(t, environ)
	return logs.String
}

func startServerWithLogs(t *testing.T, environ []string) (string, *lockedBuffer) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"serve"}, append(environ, "PROGRESSDB_ADDR="+addr), nil, logs, logs)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("serve exited %d:\n%s", code, logs)
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; {
		res, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return addr, logs
			}
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d before answering:\n%s", code, logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server at %s did not answer /healthz: %v\n%s", addr, err, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// retention status shows the running server's configuration and next run,
// not the calling shell's, and never passes the shell's off as the server's.
func TestRetentionStatusAsksTheRunningServer(t *testing.T) {
	server := newHarness(t,
		"PROGRESSDB_ADMIN_TOKEN=adm",
		"PROGRESSDB_RETENTION_PERIOD=2d",
		"PROGRESSDB_RETENTION_CRON=@every 1h",
	)
	before := time.Now()
	addr := startServer(t, server.environ)
	after := time.Now()

	// The operator's shell: the same database and server, another
	// configuration of its own.
	shell := &harness{t: t, dbPath: server.dbPath, environ: []string{
		"PROGRESSDB_DB_PATH=" + server.dbPath,
		"PROGRESSDB_ADDR=" + addr,
		"PROGRESSDB_ADMIN_TOKEN=adm",
		"PROGRESSDB_LOG_LEVEL=warn",
		"PROGRESSDB_RETENTION_ENABLED=false",
		"PROGRESSDB_RETENTION_PERIOD=30d",
	}}
	var rep struct {
		Source  string     `json:"source"`
		Server  string     `json:"server"`
		Enabled bool       `json:"enabled"`
		Period  string     `json:"period"`
		Cron    string     `json:"cron"`
		NextRun *time.Time `json:"next_run"`
		Paused  bool       `json:"paused"`
	}
	if err := json.Unmarshal([]byte(shell.mustRun("retention", "status", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Source != "server" || rep.Server != "http://"+addr || !rep.Enabled || rep.Period != "2d" || rep.Cron != "@every 1h" {
		t.Fatalf("status: %+v", rep)
	}
	// @every counts from the server's start, which only the server knows.
	if rep.NextRun == nil || rep.NextRun.Before(before.Add(time.Hour-time.Second)) || rep.NextRun.After(after.Add(time.Hour)) {
		t.Fatalf("next run %v, want an hour after the server started (%v..%v)", rep.NextRun, before, after)
	}
	out := shell.mustRun("retention", "status")
	for _, want := range []string{"source:          server at http://" + addr, "period:          2d", "schedule:        @every 1h", "enabled:         true"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}

	// Without a token: only what the server writes to disk, and a note
	// saying what to set; nothing of the shell's configuration.
	noToken := &harness{t: t, dbPath: server.dbPath, environ: append(shell.environ, "PROGRESSDB_ADMIN_TOKEN=")}
	out = noToken.mustRun("retention", "status")
	if !strings.Contains(out, "source:          files") || !strings.Contains(out, "PROGRESSDB_ADMIN_TOKEN") ||
		strings.Contains(out, "enabled:") || strings.Contains(out, "period:") || strings.Contains(out, "next run:") {
		t.Fatalf("status without a token:\n%s", out)
	}

	// A wrong token: the same files view, exit 1, and the server's answer.
	wrong := &harness{t: t, dbPath: server.dbPath, environ: append(shell.environ, "PROGRESSDB_ADMIN_TOKEN=nope")}
	code, out, errOut := wrong.run("retention", "status", "--json")
	if code != exitFailed || !strings.Contains(out, `"source": "files"`) || !strings.Contains(errOut, "401") {
		t.Fatalf("wrong token: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
}

// With no server on the database, status says the configuration is the
// shell's and that nothing is scheduled.
func TestRetentionStatusWithoutAServer(t *testing.T) {
	h := newHarness(t, "PROGRESSDB_RETENTION_CRON=@every 1h")
	h.createDB()
	out := h.mustRun("retention", "status")
	if !strings.Contains(out, "source:          database") || !strings.Contains(out, "this shell's configuration") ||
		!strings.Contains(out, "next run:        none (no server is running)") {
		t.Fatalf("status:\n%s", out)
	}
}

// After a run the lease is released: status shows it free and when it was
// released, in text and in --json (state "released"), never as an expiry
// in the past. A lease its holder stopped renewing shows as expired.
func TestRetentionStatusShowsAReleasedLease(t *testing.T) {
	h := newHarness(t)
	h.createDB()
	h.mustRun("retention", "run")
	out := h.mustRun("retention", "status")
	if !strings.Contains(out, "lease:           free (released by ") || strings.Contains(out, "expires=") {
		t.Errorf("text status of a released lease:\n%s", out)
	}
	var rep struct {
		Lease map[string]any `json:"lease"`
	}
	if err := json.Unmarshal([]byte(h.mustRun("retention", "status", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if l := rep.Lease; l["state"] != "released" || l["held"] != false || l["released_at"] == nil || l["owner"] == "" {
		t.Errorf("--json lease of a released lease: %v", l)
	}

	// The holder died: the file still says what it last renewed, with no
	// released_at, and that time has passed.
	leasePath := filepath.Join(h.dbPath, "purge_audit", "retention.lock")
	data, err := os.ReadFile(leasePath)
	if err != nil {
		t.Fatal(err)
	}
	var lease map[string]any
	if err := json.Unmarshal(data, &lease); err != nil {
		t.Fatal(err)
	}
	delete(lease, "released_at")
	data, _ = json.Marshal(lease)
	if err := os.WriteFile(leasePath, data, 0o640); err != nil {
		t.Fatal(err)
	}
	out = h.mustRun("retention", "status")
	if !strings.Contains(out, "lease:           free (expired at ") {
		t.Errorf("text status of an expired lease:\n%s", out)
	}
	if err := json.Unmarshal([]byte(h.mustRun("retention", "status", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if l := rep.Lease; l["state"] != "expired" || l["held"] != false {
		t.Errorf("--json lease of an expired lease: %v", l)
	}
}
