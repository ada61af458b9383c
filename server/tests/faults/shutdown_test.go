package faults

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
)

// waitedRun is the answer to a waited POST /admin/retention/run.
type waitedRun struct {
	status int
	result retention.Result
	err    error
}

// postRun sends a waited POST /admin/retention/run with client and
// delivers its answer.
func postRun(ctx context.Context, client *http.Client, url string) <-chan waitedRun {
	out := make(chan waitedRun, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, "POST", url+"/admin/retention/run", nil)
		if err != nil {
			out <- waitedRun{err: err}
			return
		}
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := client.Do(req)
		if err != nil {
			out <- waitedRun{err: err}
			return
		}
		defer resp.Body.Close()
		w := waitedRun{status: resp.StatusCode}
		data, err := io.ReadAll(resp.Body)
		if err == nil {
			err = json.Unmarshal(data, &w.result)
		}
		w.err = err
		out <- w
	}()
	return out
}

// slowRunEnv paces a run so that a signal or a hang-up lands in the middle.
func slowRunEnv(s site) envVars {
	return s.env().with(
		"PROGRESSDB_ADMIN_TOKEN", adminToken,
		"PROGRESSDB_RETENTION_RUN_MISSED", "false",
		"PROGRESSDB_RETENTION_CRON", "0 2 * * *",
		"PROGRESSDB_RETENTION_BATCH_SIZE", "50",
		"PROGRESSDB_RETENTION_BATCH_PAUSE", "20ms",
	)
}

// waitForRecords waits until the server's run in progress has recorded
// at least one item, and returns that run's ID.
func waitForRecords(t testing.TB, srv *server, s site) string {
	t.Helper()
	var id string
	waitFor(t, time.Minute, "the run to record an item", func() bool {
		if srv.exited() {
			t.Fatalf("server exited with status %d\n%s", srv.code, srv.output())
		}
		for _, f := range inProgress(readAudit(t, s.audit)) {
			if len(f.items) > 0 {
				id = f.runID()
				return true
			}
		}
		return false
	})
	return id
}

// TestFaultShutdownDuringWaitedRun sends SIGTERM to a server while a
// waited POST /admin/retention/run purges: the run stops at its next batch
// boundary with an interrupted footer, the client gets the run's result,
// the server exits 0, and everything stays consistent.
func TestFaultShutdownDuringWaitedRun(t *testing.T) {
	t.Parallel()
	s, fx, before := prepareSite(t, t.TempDir(), smallSpec(), trialRand(t, 0))
	srv := startServer(t, slowRunEnv(s))
	answer := postRun(context.Background(), &http.Client{Timeout: time.Minute}, srv.url)
	id := waitForRecords(t, srv, s)
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := srv.wait(t, time.Minute)
	a := <-answer
	if a.err != nil || a.status != http.StatusOK || a.result.RunID != id || a.result.Status != audit.RunInterrupted {
		t.Fatalf("answer to the waited run: status %d, %+v, %v; want 200 with run %s interrupted\n%s",
			a.status, a.result, a.err, id, srv.output())
	}
	if code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0\n%s", code, srv.output())
	}
	f := fileOfRun(readAudit(t, s.audit), id)
	if f == nil || !f.sealed || f.footer == nil || f.footer.Status != audit.RunInterrupted ||
		!strings.Contains(f.footer.Reason, "shutdown") {
		t.Fatalf("audit file of the run: %+v", f)
	}
	if strings.Contains(srv.stderr.String(), "panic") {
		t.Fatalf("the server panicked on the way out\n%s", srv.output())
	}
	checkConsistent(t, s, fx, before)
}

// TestFaultClientHangsUpOnWaitedRun: a client (or a proxy) that gives up
// on a waited run does not interrupt it: the run completes, and its footer
// does not claim a shutdown.
func TestFaultClientHangsUpOnWaitedRun(t *testing.T) {
	t.Parallel()
	s, fx, before := prepareSite(t, t.TempDir(), smallSpec(), trialRand(t, 0))
	srv := startServer(t, slowRunEnv(s))
	ctx, hangUp := context.WithCancel(context.Background())
	answer := postRun(ctx, &http.Client{}, srv.url)
	id := waitForRecords(t, srv, s)
	hangUp()
	if a := <-answer; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("the client did not hang up: %+v", a)
	}
	waitFor(t, 2*time.Minute, "the run to finish", func() bool {
		f := fileOfRun(readAudit(t, s.audit), id)
		return f != nil && f.sealed
	})
	f := fileOfRun(readAudit(t, s.audit), id)
	if f.footer == nil || f.footer.Status != audit.RunCompleted || strings.Contains(f.footer.Reason, "shutdown") {
		t.Fatalf("footer of the run the client hung up on: %+v", f.footer)
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("exit status %d after SIGTERM\n%s", code, srv.output())
	}
	checkInvariants(t, s, fx, before, nil)
}
