package faults

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
)

// crashSpec is the database the crash scenarios run on: eligible threads
// with messages and versions (some deleted too), live threads with due and
// recent message deletions, legal holds, recent thread deletions.
func crashSpec() fixtureSpec {
	return pick(
		fixtureSpec{EligibleThreads: 80, LiveThreads: 80, HeldThreads: 5, RecentThreads: 5,
			Messages: 20, Versions: 2, OldDeletedMessages: 2, RecentDeletedMessages: 1},
		fixtureSpec{EligibleThreads: 200, LiveThreads: 200, HeldThreads: 10, RecentThreads: 10,
			Messages: 50, Versions: 2, OldDeletedMessages: 2, RecentDeletedMessages: 1},
	)
}

// pacedEnv slows purges down so that a kill lands in the middle of one:
// small batches with a pause between them.
func pacedEnv(s site) envVars {
	return s.env().with(
		"PROGRESSDB_RETENTION_BATCH_SIZE", "50",
		"PROGRESSDB_RETENTION_BATCH_PAUSE", "2ms",
	)
}

// prepareSite seeds a fixture into a new site under dir and snapshots it.
func prepareSite(t testing.TB, dir string, spec fixtureSpec, rng *rand.Rand) (site, *fixture, dbState) {
	t.Helper()
	s := newSite(dir)
	fx := seedFixture(t, s.db, spec, rng)
	return s, fx, snapshotLive(t, s.db)
}

// TestFaultCrashAnyInstant kills `progressdb retention run` with SIGKILL at
// random instants (startup, sealing, header, mid-batch, mid-flush, footer,
// rename), checks after every kill that the state is consistent, reruns
// until a run completes and checks every invariant.
func TestFaultCrashAnyInstant(t *testing.T) {
	t.Parallel()
	spec := crashSpec()
	window := cleanRunDuration(t, spec)
	t.Logf("a clean run takes %s; kills land within %s of a start", window, window)
	for i := range suite.trials {
		t.Run(fmt.Sprintf("trial_%d", i), func(t *testing.T) {
			rng := trialRand(t, i)
			s, fx, before := prepareSite(t, t.TempDir(), spec, rng)
			kills := 1 + rng.IntN(3)
			crashes := crashUntilComplete(t, s, fx, before, pacedEnv(s), kills, rng, window)
			checkInvariants(t, s, fx, before, crashes.abandoned)
		})
	}
}

// cleanRunDuration runs retention once, uninterrupted, on a fixture of spec
// and returns how long the process took. It checks the invariants too, so
// the checks are known to pass on a run nothing disturbed.
func cleanRunDuration(t *testing.T, spec fixtureSpec) time.Duration {
	t.Helper()
	var d time.Duration
	t.Run("clean", func(t *testing.T) {
		s, fx, before := prepareSite(t, t.TempDir(), spec, trialRand(t, -1))
		began := time.Now()
		p, res := runRetention(t, pacedEnv(s))
		d = time.Since(began)
		if p.code != 0 || res == nil || res.Status != audit.RunCompleted {
			t.Fatalf("clean run: exit %d, result %+v\n%s", p.code, res, p.output())
		}
		checkInvariants(t, s, fx, before, nil)
	})
	if d == 0 {
		t.FailNow()
	}
	return d
}

// crashUntilComplete runs `retention run` on s again and again, killing
// the first kills runs with SIGKILL at a random instant (killDelay), and
// lets the next one complete.
func crashUntilComplete(t testing.TB, s site, fx *fixture, before dbState, env envVars, kills int,
	rng *rand.Rand, window time.Duration) *crashLog {
	t.Helper()
	crashes := &crashLog{}
	for attempt := 0; ; attempt++ {
		if attempt > kills+3 {
			t.Fatalf("no run completed in %d attempts", attempt)
		}
		p := startRetention(t, env)
		if attempt < kills {
			delay := killDelay(rng, window)
			if killAfter(p, delay) {
				crashes.killed(t, s, fx, before, fmt.Sprintf("attempt %d, after %s", attempt, delay))
				continue
			}
			t.Logf("attempt %d: finished before the kill planned at %s", attempt, delay)
		}
		if code := p.wait(t, processTimeout); code != 0 {
			t.Fatalf("attempt %d: exit %d\n%s", attempt, code, p.output())
		}
		if res := parseResult(p); res == nil || res.Status != audit.RunCompleted {
			t.Fatalf("attempt %d: no completed run\n%s", attempt, p.output())
		}
		return crashes
	}
}

// killDelay draws when to kill a run that takes about window: anywhere in
// it, with extra weight on the first 50ms (process start, Pebble recovery,
// sealing abandoned files, the header) and on the last tenth (the last
// flush, the footer, the rename), where the rarest instants are.
func killDelay(rng *rand.Rand, window time.Duration) time.Duration {
	switch rng.IntN(4) {
	case 0:
		return time.Duration(rng.Int64N(int64(50 * time.Millisecond)))
	case 1:
		return window*9/10 + time.Duration(rng.Int64N(int64(window/5)))
	default:
		return time.Duration(rng.Int64N(int64(window)))
	}
}

// killAfter kills p with SIGKILL after delay, unless it exits first; it
// reports whether it killed it.
func killAfter(p *proc, delay time.Duration) bool {
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-p.done:
		return false
	case <-timer.C:
		p.kill()
		return true
	}
}

// crashLog follows what kills leave behind.
type crashLog struct {
	kills     int
	seen      map[string]bool
	abandoned []string // runs whose files a kill left in progress without a footer
}

// killed notes the runs a kill left in progress and checks that the state
// is consistent; an inconsistent state ends the test.
func (c *crashLog) killed(t testing.TB, s site, fx *fixture, before dbState, what string) {
	t.Helper()
	c.kills++
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	left := abandonedRuns(t, s)
	t.Logf("killed (%s); runs left in progress: %v", what, left)
	for _, id := range left {
		if !c.seen[id] {
			c.seen[id] = true
			c.abandoned = append(c.abandoned, id)
		}
	}
	checkConsistent(t, s, fx, before)
	if t.Failed() {
		t.FailNow()
	}
}
