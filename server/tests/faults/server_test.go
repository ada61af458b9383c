package faults

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
)

// TestFaultServerKilledMidRun kills `progressdb serve` with SIGKILL in the
// middle of a run asked for over HTTP, restarts it, kills it in the middle
// of a scheduled run, restarts it again and lets the schedule finish the
// work; then checks every invariant.
func TestFaultServerKilledMidRun(t *testing.T) {
	t.Parallel()
	spec := crashSpec()
	for i := range pick(1, max(2, suite.trials/5)) {
		t.Run(fmt.Sprintf("trial_%d", i), func(t *testing.T) {
			rng := trialRand(t, i)
			s, fx, before := prepareSite(t, t.TempDir(), spec, rng)
			// Slower than pacedEnv: the kill waits for the audit file,
			// which a loaded machine reads slowly, and must still land
			// before the run ends.
			onDemand := pacedEnv(s).with(
				"PROGRESSDB_RETENTION_BATCH_PAUSE", "20ms",
				"PROGRESSDB_ADMIN_TOKEN", adminToken,
				"PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD", "true",
				"PROGRESSDB_RETENTION_RUN_MISSED", "false",
				"PROGRESSDB_RETENTION_CRON", "0 2 * * *",
			)
			scheduled := onDemand.with("PROGRESSDB_RETENTION_CRON", "@every 1s")
			crashes := &crashLog{}

			srv := startServer(t, onDemand)
			var started struct {
				RunID string `json:"run_id"`
			}
			srv.mustCall(t, "POST", "/admin/retention/run?wait=false", nil, adminToken, http.StatusAccepted, &started)
			killMidRun(t, srv.proc, s, started.RunID, len(fx.due), rng)
			crashes.killed(t, s, fx, before, "server, run asked for over HTTP")

			known := runIDs(readAudit(t, s.audit))
			srv = startServer(t, scheduled)
			id := waitForNewRun(t, srv.proc, s, known)
			killMidRun(t, srv.proc, s, id, len(fx.due), rng)
			crashes.killed(t, s, fx, before, "server, scheduled run")

			restarted := time.Now()
			srv = startServer(t, scheduled)
			waitFor(t, 2*time.Minute, "a scheduled run to complete", func() bool {
				var st retention.Status
				srv.mustCall(t, "GET", "/admin/retention", nil, adminToken, http.StatusOK, &st)
				return st.LastRun != nil && st.LastRun.Status == audit.RunCompleted && st.LastRun.StartedAt.After(restarted)
			})
			if code := srv.stop(t); code != 0 {
				t.Fatalf("server exit status %d after SIGTERM\n%s", code, srv.output())
			}
			checkInvariants(t, s, fx, before, crashes.abandoned)
		})
	}
}

// killMidRun waits until run id has recorded k items, k drawn from 1 to
// half of due, lets up to 50ms more pass, kills p with SIGKILL and checks
// that the run was still in progress.
func killMidRun(t testing.TB, p *proc, s site, id string, due int, rng *rand.Rand) {
	t.Helper()
	k := 1 + rng.IntN(max(1, due/2))
	waitFor(t, 2*time.Minute, fmt.Sprintf("run %s to record %d items", id, k), func() bool {
		if p.exited() {
			t.Fatalf("%s exited with status %d\n%s", p, p.code, p.output())
		}
		f := fileOfRun(readAudit(t, s.audit), id)
		return f != nil && len(f.items) >= k
	})
	killAfter(p, time.Duration(rng.Int64N(int64(50*time.Millisecond))))
	if f := fileOfRun(readAudit(t, s.audit), id); f == nil || f.sealed {
		t.Fatalf("run %s finished before the kill: the fixture is too small to kill it mid-run", id)
	}
}

// waitForNewRun waits for an audit file in progress of a run not in known,
// and returns its run ID.
func waitForNewRun(t testing.TB, p *proc, s site, known map[string]bool) string {
	t.Helper()
	var id string
	waitFor(t, 2*time.Minute, "a new run to start", func() bool {
		if p.exited() {
			t.Fatalf("%s exited with status %d\n%s", p, p.code, p.output())
		}
		for _, f := range inProgress(readAudit(t, s.audit)) {
			if !known[f.runID()] {
				id = f.runID()
				return true
			}
		}
		return false
	})
	return id
}

// runIDs returns the run IDs of files.
func runIDs(files []auditFile) map[string]bool {
	ids := map[string]bool{}
	for _, f := range files {
		ids[f.runID()] = true
	}
	return ids
}
