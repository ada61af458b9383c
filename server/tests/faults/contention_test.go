package faults

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
)

// TestFaultContention runs `retention run` in a loop from three processes
// at once, each on its own database (Pebble is single-process) but with one
// audit folder and one lease, and checks from the audit files that the
// lease was never held twice: the runs' intervals never overlap, epochs
// strictly increase, every purge lies inside its run's interval, and exit
// statuses are only 0 (completed) or 75 (lease held elsewhere).
func TestFaultContention(t *testing.T) {
	t.Parallel()
	const workers = 3
	shared := newSite(t.TempDir())
	envs := make([]envVars, workers)
	for w := range envs {
		envs[w] = shared.env().with(
			"PROGRESSDB_DB_PATH", filepath.Join(shared.dir, fmt.Sprintf("db%d", w)),
			"PROGRESSDB_RETENTION_BATCH_SIZE", "50",
			"PROGRESSDB_RETENTION_BATCH_PAUSE", "1ms",
			"PROGRESSDB_LOG_LEVEL", "warn",
		)
		p := runCLI(t, envs[w], "seed", "--threads", "40", "--messages", "10", "--versions", "2",
			"--deleted", "0.5", "--deleted-age", "40d")
		if p.code != 0 {
			t.Fatalf("seed db%d: exit %d\n%s", w, p.code, p.output())
		}
	}

	deadline := time.Now().Add(pick(3*time.Second, 30*time.Second))
	codes := make([]map[int]int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		codes[w] = map[int]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				p, err := launch(envs[w], []string{binary, "retention", "run", "--json"})
				if err != nil {
					t.Errorf("worker %d: start: %v", w, err)
					return
				}
				code, ok := p.waitTimeout(processTimeout)
				if !ok || (code != 0 && code != exitLeaseHeld) {
					t.Errorf("worker %d: exit %d (want 0 or %d)\n%s", w, code, exitLeaseHeld, p.output())
					return
				}
				codes[w][code]++
			}
		}()
	}
	wg.Wait()

	completed := 0
	for w, c := range codes {
		t.Logf("worker %d: %d runs completed, %d skipped (lease held elsewhere)", w, c[0], c[exitLeaseHeld])
		if c[0] == 0 {
			t.Errorf("worker %d never got the lease", w)
		}
		completed += c[0]
	}

	files := readAudit(t, shared.audit)
	if len(files) != completed {
		t.Errorf("%d audit files for %d completed runs", len(files), completed)
	}
	checkSealed(t, shared.audit, files, nil)
	checkLeaseFree(t, shared.lease)
	checkExclusive(t, files)
}

// exitLeaseHeld is the exit status of `retention run` when another process
// holds the lease (spec §9).
const exitLeaseHeld = 75

// checkExclusive checks, over the sealed files of one audit folder sorted
// by start, that each run's interval (header started_at to footer
// finished_at) ends before the next one starts, that epochs strictly
// increase, and that every record lies inside its run's interval.
func checkExclusive(t testing.TB, files []auditFile) {
	t.Helper()
	bad := &findings{t: t}
	defer bad.close()
	var prev *auditFile
	for i := range files {
		f := &files[i]
		if f.header == nil || f.footer == nil {
			bad.errorf("%s: no header or footer", f.path)
			continue
		}
		from, to := f.header.StartedAt, f.footer.FinishedAt
		if to.Before(from) {
			bad.errorf("%s: finished at %s before it started at %s", f.path, to, from)
		}
		for _, it := range f.items {
			if it.Time.Before(from) || it.Time.After(to) {
				bad.errorf("%s: record of %s written at %s, outside the run's lease %s – %s", f.path, it.ref(), it.Time, from, to)
			}
			if it.Status == audit.StatusPurged && it.PurgedAt != nil && (it.PurgedAt.Before(from) || it.PurgedAt.After(to)) {
				bad.errorf("%s: %s purged at %s, outside the run's lease %s – %s", f.path, it.ref(), it.PurgedAt, from, to)
			}
		}
		if prev != nil {
			if !prev.footer.FinishedAt.Before(from) && !prev.footer.FinishedAt.Equal(from) {
				bad.errorf("runs overlap: %s (%s – %s, epoch %d) and %s (%s – %s, epoch %d)",
					prev.runID(), prev.header.StartedAt, prev.footer.FinishedAt, prev.header.Epoch,
					f.runID(), from, to, f.header.Epoch)
			}
			if f.header.Epoch <= prev.header.Epoch {
				bad.errorf("epoch did not increase: run %s has %d after run %s had %d",
					f.runID(), f.header.Epoch, prev.runID(), prev.header.Epoch)
			}
		}
		prev = f
	}
}
