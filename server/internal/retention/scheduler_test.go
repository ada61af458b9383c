package retention

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

type firedRun struct {
	trigger string
	res     Result
	err     error
}

// schedRecorder collects what a scheduler did, through its test hooks.
type schedRecorder struct {
	done    chan firedRun
	skipped chan struct{}

	mu    sync.Mutex
	fired []string
}

func (e *env) scheduler(r *Runner, spec string, runMissed bool) (*Scheduler, *schedRecorder) {
	e.t.Helper()
	s, err := NewScheduler(SchedulerOptions{
		Runner:    r,
		Spec:      spec,
		RunMissed: runMissed,
		Clock:     e.clock,
		Logger:    e.logger,
		Metrics:   e.metrics,
		AuditPath: e.cfg.AuditPath,
	})
	if err != nil {
		e.t.Fatalf("NewScheduler: %v", err)
	}
	rec := &schedRecorder{done: make(chan firedRun, 16), skipped: make(chan struct{}, 16)}
	s.hooks.runFired = func(trigger string) {
		rec.mu.Lock()
		rec.fired = append(rec.fired, trigger)
		rec.mu.Unlock()
	}
	s.hooks.runDone = func(trigger string, res Result, err error) { rec.done <- firedRun{trigger, res, err} }
	s.hooks.tickSkipped = func() { rec.skipped <- struct{}{} }
	e.t.Cleanup(s.Stop)
	return s, rec
}

func (rec *schedRecorder) firedRuns() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.fired...)
}

func (rec *schedRecorder) next(t *testing.T) firedRun {
	t.Helper()
	select {
	case f := <-rec.done:
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("no run finished within 10s")
		return firedRun{}
	}
}

// dueThread makes a thread deleted long enough ago to be purged at t0.
func (e *env) dueThread(tid string, msgs, versions int) {
	e.t.Helper()
	e.at(-31 * day)
	e.thread(tid, msgs, versions)
	e.deleteThread(tid)
	e.at(0)
}

func TestSchedulerFiresRunsOnTheSchedule(t *testing.T) {
	e := newEnv(t)
	e.dueThread("t1", 1, 1)
	s, rec := e.scheduler(e.runner(), "0 2 * * *", false)

	wantNext := time.Date(2025, 3, 2, 2, 0, 0, 0, time.UTC)
	if got := s.Next(); !got.Equal(wantNext) {
		t.Fatalf("Next before Start = %s, want %s", got, wantNext)
	}
	if got := counterValue(t, e.metrics.Enabled); got != 0 {
		t.Fatalf("enabled = %v before Start", got)
	}
	s.Start(context.Background())
	if ds := e.clock.waitTimers(t, 1); ds[0] != 14*time.Hour {
		t.Fatalf("first tick armed in %s, want 14h", ds[0])
	}
	if got := s.Next(); !got.Equal(wantNext) {
		t.Fatalf("Next = %s, want %s", got, wantNext)
	}
	e.clock.Advance(14 * time.Hour)
	f := rec.next(t)
	if f.trigger != TriggerSchedule || f.err != nil || f.res.Status != audit.RunCompleted || f.res.Purged != 1 {
		t.Fatalf("scheduled run: %+v", f)
	}
	if ds := e.clock.waitTimers(t, 1); ds[0] != 24*time.Hour {
		t.Fatalf("second tick armed in %s, want 24h", ds[0])
	}
	e.clock.Advance(24 * time.Hour)
	if f := rec.next(t); f.err != nil || f.res.Status != audit.RunCompleted {
		t.Fatalf("second scheduled run: %+v", f)
	}
	if got := rec.firedRuns(); len(got) != 2 {
		t.Fatalf("fired %v, want two scheduled runs", got)
	}
	// The enabled gauge follows the scheduler.
	if got := counterValue(t, e.metrics.Enabled); got != 1 {
		t.Fatalf("enabled = %v while the scheduler runs", got)
	}
	if got := counterValue(t, e.metrics.DryRun); got != 0 {
		t.Fatalf("dry_run = %v with DRY_RUN off", got)
	}
	s.Stop()
	if got := counterValue(t, e.metrics.Enabled); got != 0 {
		t.Fatalf("enabled = %v after Stop", got)
	}
}

// A scheduler of dry runs says so, for the alert on missing successes.
func TestSchedulerDryRunGauge(t *testing.T) {
	e := newEnv(t)
	e.cfg.DryRun = true
	s, _ := e.scheduler(e.runner(), "0 2 * * *", false)
	s.Start(context.Background())
	if en, dry := counterValue(t, e.metrics.Enabled), counterValue(t, e.metrics.DryRun); en != 1 || dry != 1 {
		t.Fatalf("enabled = %v, dry_run = %v while a dry-run scheduler runs", en, dry)
	}
	s.Stop()
	if dry := counterValue(t, e.metrics.DryRun); dry != 0 {
		t.Fatalf("dry_run = %v after Stop", dry)
	}
}

func TestSchedulerSkipsATickWhileARunGoes(t *testing.T) {
	e := newEnv(t)
	e.cfg.BatchSize = 2
	e.dueThread("t1", 2, 2)
	r := e.runner()
	reached, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r.hooks.beforeBatch = func(ctx context.Context, b batchPoint) {
		once.Do(func() {
			close(reached)
			<-proceed
		})
	}
	s, rec := e.scheduler(r, "@every 1m", false)
	s.Start(context.Background())

	e.clock.waitTimers(t, 1)
	e.clock.Advance(time.Minute)
	<-reached
	e.clock.waitTimers(t, 1)
	e.clock.Advance(time.Minute) // the run is still going
	select {
	case <-rec.skipped:
	case <-time.After(10 * time.Second):
		t.Fatal("overlapping tick not skipped")
	}
	if got := counterValue(t, e.metrics.TicksSkipped); got != 1 {
		t.Fatalf("ticks_skipped_total = %v", got)
	}
	if !strings.Contains(e.logs.String(), `"msg":"retention_tick_skipped"`) {
		t.Fatal("skipped tick not logged")
	}
	close(proceed)
	if f := rec.next(t); f.err != nil || f.res.Status != audit.RunCompleted || f.res.Purged != 1 {
		t.Fatalf("run: %+v", f)
	}
	if got := rec.firedRuns(); len(got) != 1 {
		t.Fatalf("fired %v, want one run", got)
	}
}

func TestSchedulerRunsAMissedRunAtStart(t *testing.T) {
	cases := []struct {
		name      string
		lastRun   bool
		startAt   time.Duration // after t0 (12:00 on March 1st)
		runMissed bool
		wantRun   bool
	}{
		{"missed run happens at once", true, 15 * time.Hour, true, true},
		{"next run not due yet", true, 13 * time.Hour, true, false},
		{"no run on record", false, 15 * time.Hour, true, false},
		{"run missed but RUN_MISSED off", true, 15 * time.Hour, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			r := e.runner()
			if tc.lastRun {
				e.run(r, RunRequest{Trigger: TriggerSchedule})
			}
			e.dueThread("t1", 1, 1)
			e.at(tc.startAt)
			s, rec := e.scheduler(r, "0 2 * * *", tc.runMissed)
			s.Start(context.Background())
			e.clock.waitTimers(t, 1) // the loop is past its startup check
			fired := rec.firedRuns()
			if !tc.wantRun {
				if len(fired) != 0 {
					t.Fatalf("fired %v, want nothing", fired)
				}
				return
			}
			if len(fired) != 1 || fired[0] != TriggerStartup {
				t.Fatalf("fired %v, want one startup run", fired)
			}
			if f := rec.next(t); f.trigger != TriggerStartup || f.err != nil || f.res.Purged != 1 {
				t.Fatalf("startup run: %+v", f)
			}
		})
	}
}

func TestSchedulerRecoversFromAPanickingRun(t *testing.T) {
	e := newEnv(t)
	e.dueThread("t1", 2, 2)
	r := e.runner()
	var panicked atomic.Bool
	r.hooks.beforeBatch = func(ctx context.Context, b batchPoint) {
		if panicked.CompareAndSwap(false, true) {
			panic("boom")
		}
	}
	s, rec := e.scheduler(r, "@every 1m", false)
	s.Start(context.Background())

	e.clock.waitTimers(t, 1)
	e.clock.Advance(time.Minute)
	f := rec.next(t)
	if f.err == nil || !strings.Contains(f.err.Error(), "boom") {
		t.Fatalf("panicking run: %+v", f)
	}
	if got := counterValue(t, e.metrics.Errors.WithLabelValues(stagePanic)); got != 1 {
		t.Fatalf("errors_total{stage=panic} = %v", got)
	}
	if got := counterValue(t, e.metrics.LeaseHeld); got != 0 {
		t.Fatalf("lease_held = %v after the panic", got)
	}

	// The loop goes on; the next run seals the abandoned file and finishes
	// the purge the panic interrupted.
	e.clock.waitTimers(t, 1)
	e.clock.Advance(time.Minute)
	f = rec.next(t)
	if f.err != nil || f.res.Status != audit.RunCompleted {
		t.Fatalf("run after the panic: %+v", f)
	}
	if it := e.audit(f.res).item(t, "t1"); it.Status != audit.StatusPurged || !it.Recovered {
		t.Fatalf("record %+v", it)
	}
	rep, err := audit.VerifyDir(e.cfg.AuditPath)
	if err != nil || rep.Files != 2 || rep.Verified != 2 || len(rep.InProgress) != 0 {
		t.Fatalf("audit folder: %+v %v", rep, err)
	}
}

func TestSchedulerStopInterruptsTheRunAtABatchBoundary(t *testing.T) {
	e := newEnv(t)
	e.cfg.BatchSize = 2
	e.dueThread("t1", 3, 2)
	r := e.runner()
	reached := make(chan struct{})
	var once sync.Once
	r.hooks.beforeBatch = func(ctx context.Context, b batchPoint) {
		if b.N == 2 {
			once.Do(func() { close(reached) })
			<-ctx.Done() // hold the run here until Stop
		}
	}
	s, rec := e.scheduler(r, "@every 1m", false)
	s.Start(context.Background())
	e.clock.waitTimers(t, 1)
	e.clock.Advance(time.Minute)
	<-reached

	s.Stop()
	f := rec.next(t)
	if f.err != nil || f.res.Status != audit.RunInterrupted {
		t.Fatalf("stopped run: %+v", f)
	}
	ra := e.audit(f.res)
	if ra.Footer.Status != audit.RunInterrupted {
		t.Fatalf("footer %+v", ra.Footer)
	}
	if it := ra.item(t, "t1"); it.Status != audit.StatusFailed || it.Reason != reasonInterrupted {
		t.Fatalf("record %+v", it)
	}
	other, err := AcquireLease(context.Background(), LeaseConfig{
		Path: e.cfg.LeasePath, TTL: time.Minute, Owner: "next/1/0001", Host: "test-host", PID: 1, Now: e.clock.Now,
	})
	if err != nil {
		t.Fatalf("lease not released by the stopped run: %v", err)
	}
	_ = other.Release()
	if !e.exists(store.KindThread, "t1") {
		t.Fatal("test setup: the purge finished before the stop")
	}
}

func TestNewSchedulerRejectsABadSpec(t *testing.T) {
	e := newEnv(t)
	_, err := NewScheduler(SchedulerOptions{Runner: e.runner(), Spec: "every day"})
	if err == nil || !strings.Contains(err.Error(), "every day") {
		t.Fatal("bad schedule accepted")
	}
}
