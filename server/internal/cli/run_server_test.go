package cli

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
)

// startBinaryServer starts `progressdb serve` from the built binary with
// environ on a free loopback port, waits until /healthz answers, and
// stops it (SIGTERM) when the test ends. It returns the address.
func startBinaryServer(t *testing.T, environ []string) string {
	t.Helper()
	addr, _ := startServe(t, environ, http.DefaultClient, "http")
	return addr
}

// startServe is startBinaryServer over scheme, asking /healthz with c;
// it returns the address and the serving process.
func startServe(t *testing.T, environ []string, c *http.Client, scheme string) (string, *exec.Cmd) {
	t.Helper()
	addr, cmd, _ := startServeStop(t, environ, c, scheme)
	return addr, cmd
}

// startServeStop is startServe that also returns stop, which ends the
// server with SIGTERM and fails the test unless it exits cleanly; the
// test's end calls it too, once in all.
func startServeStop(t *testing.T, environ []string, c *http.Client, scheme string) (addr string, cmd *exec.Cmd, stop func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = l.Addr().String()
	l.Close()
	cmd = exec.Command(binary(t), "serve")
	cmd.Env = append(append([]string(nil), environ...), "PROGRESSDB_ADDR="+addr)
	var logs lockedBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			if err := <-exited; err != nil {
				t.Errorf("serve: %v\n%s", err, logs.String())
			}
		})
	}
	t.Cleanup(stop)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if res, err := c.Get(scheme + "://" + addr + "/healthz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return addr, cmd, stop
			}
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("serve exited before answering: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not answer /healthz over %s\n%s", scheme, logs.String())
		}
	}
}

// serverEnv is the environment of the built binary's processes on the
// harness's database: a server with admin token "adm", and the commands
// that ask it.
func serverEnv(h *harness, extra ...string) []string {
	return append([]string{
		"PATH=" + os.Getenv("PATH"),
		"PROGRESSDB_DB_PATH=" + h.dbPath,
		"PROGRESSDB_LOG_LEVEL=warn",
		"PROGRESSDB_ADMIN_TOKEN=adm",
	}, extra...)
}

// `retention run` while a server holds the database goes through the
// server's admin API, with the output and exit statuses of a run on the
// database, and a server with retention off (the scheduler switch) runs
// it. Before, the command refused (exit 1, "ask that server instead").
func TestRetentionRunThroughTheServer(t *testing.T) {
	h := newHarness(t)
	h.seedDue()
	base := serverEnv(h)
	addr := startBinaryServer(t, base) // PROGRESSDB_RETENTION_ENABLED unset: off
	cli := append(append([]string(nil), base...), "PROGRESSDB_ADDR="+addr)
	runJSONBinary := func(args ...string) (int, runReport, string) {
		t.Helper()
		code, out, errOut := runBinary(t, cli, append([]string{"retention", "run", "--json"}, args...)...)
		return decodeRunReport(t, code, out, errOut)
	}

	code, out, errOut := runBinary(t, cli, "retention", "run", "--dry-run")
	if code != exitOK || !strings.Contains(out, "status:        completed (dry_run=true)") || errOut != "" {
		t.Fatalf("dry run through the server: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, dry, _ := runJSONBinary("--dry-run")
	if code != exitOK || dry.Result == nil || !dry.DryRun || dry.Eligible == 0 || dry.Purged != 0 {
		t.Fatalf("dry run --json through the server: exit %d, %+v", code, dry)
	}
	code, rep, errOut := runJSONBinary()
	if code != exitOK || rep.Reason != "completed" || rep.Result == nil || rep.DryRun || rep.Purged != dry.Eligible || errOut != "" {
		t.Fatalf("run through the server: exit %d, %+v, stderr %q", code, rep, errOut)
	}
	if _, err := os.Stat(rep.AuditFile); err != nil {
		t.Fatalf("the run's audit file: %v", err)
	}

	// Refusals map to the same exit statuses and reasons.
	if code, _, errOut := runBinary(t, cli, "retention", "pause"); code != exitOK {
		t.Fatalf("pause: exit %d, %s", code, errOut)
	}
	if code, rep, _ := runJSONBinary(); code != exitFailed || rep.Reason != "paused" || rep.Result != nil {
		t.Fatalf("run while paused: exit %d, %+v", code, rep)
	}
	if code, _, errOut := runBinary(t, cli, "retention", "resume"); code != exitOK {
		t.Fatalf("resume: exit %d, %s", code, errOut)
	}
	lease, err := retention.AcquireLease(context.Background(), retention.LeaseConfig{
		Path: filepath.Join(h.dbPath, "purge_audit", "retention.lock"), TTL: time.Minute,
		Owner: "elsewhere/1/x", Host: "elsewhere", PID: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	code, rep, errOut = runJSONBinary()
	lease.Release()
	if code != exitLeaseHeld || rep.Reason != "lease_held" || rep.Holder == nil || rep.Holder.Owner != "elsewhere/1/x" ||
		!strings.Contains(errOut, "elsewhere/1/x") {
		t.Fatalf("run while the lease is held elsewhere: exit %d, %+v, stderr %q", code, rep, errOut)
	}

	// Without the token the command cannot ask: it says how, exit 1.
	noToken := append(append([]string(nil), cli...), "PROGRESSDB_ADMIN_TOKEN=")
	code, out, errOut = runBinary(t, noToken, "retention", "run", "--json")
	code, rep, errOut = decodeRunReport(t, code, out, errOut)
	if code != exitFailed || rep.Reason != "database_busy" || !strings.Contains(errOut, "PROGRESSDB_ADMIN_TOKEN") {
		t.Fatalf("without a token: exit %d, %+v, stderr %q", code, rep, errOut)
	}
}

// Interrupted while it waits for the server's run, the command says the
// run goes on there (a server does not stop a run whose client hangs up),
// not that the server did not run it.
func TestRetentionRunThroughTheServerInterrupted(t *testing.T) {
	h := newHarness(t)
	h.seedDue()
	// Slow enough that the run is still going when the command is
	// interrupted.
	base := serverEnv(h, "PROGRESSDB_RETENTION_BATCH_SIZE=1", "PROGRESSDB_RETENTION_BATCH_PAUSE=100ms")
	addr := startBinaryServer(t, base)
	cmd := exec.Command(binary(t), "retention", "run")
	cmd.Env = append(append([]string(nil), base...), "PROGRESSDB_ADDR="+addr)
	var out, errOut lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The run has begun once its audit file is in progress.
	audits := filepath.Join(h.dbPath, "purge_audit")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		matches, _ := filepath.Glob(filepath.Join(audits, "*", "*.inprogress"))
		if len(matches) > 0 {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("no run began\nstderr: %s", errOut.String())
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitFailed || !strings.Contains(errOut.String(), "the run goes on in the server") {
		t.Fatalf("interrupted: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
	}
}
