package retention

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/startstop"
)

// Run triggers.
const (
	TriggerSchedule = "schedule"
	TriggerStartup  = "startup"
	TriggerAdmin    = "admin"
	TriggerCLI      = "cli"
)

// scheduled reports whether a trigger is the scheduler's own, the runs
// PROGRESSDB_RETENTION_ENABLED switches on and off.
func scheduled(trigger string) bool { return trigger == TriggerSchedule || trigger == TriggerStartup }

// SchedulerOptions configure NewScheduler.
type SchedulerOptions struct {
	Runner    *Runner
	Spec      string // 5-field cron expression or descriptor, evaluated in UTC
	RunMissed bool   // at Start, run at once if a scheduled run was missed
	Clock     Clock  // SystemClock when nil
	Logger    *slog.Logger
	Metrics   *Metrics // the runner's when nil
	AuditPath string   // where the last run is looked up for RunMissed
}

// Scheduler starts runs on a cron schedule. It never starts a run while
// one of its runs is going: such a tick is skipped, counted and logged
// (the Kubernetes CronJob "Forbid" policy). Runs are fired by its own loop
// over Clock, so tests drive it with a fake clock.
type Scheduler struct {
	runner    *Runner
	spec      string
	sched     cron.Schedule
	runMissed bool
	clock     Clock
	log       *slog.Logger
	metrics   *Metrics
	auditPath string

	next    atomic.Int64 // unix ns of the next tick; 0 before Start
	running atomic.Bool  // a run fired by this scheduler is going

	life startstop.Base
	runs sync.WaitGroup // the runs fire started; the loop waits for them

	hooks schedulerHooks
}

// schedulerHooks let tests observe the loop without sleeping. Nil in production.
type schedulerHooks struct {
	runFired    func(trigger string)                        // a run is launched
	runDone     func(trigger string, res Result, err error) // after every fired run, panics included
	tickSkipped func()
}

// NewScheduler parses the schedule (robfig/cron's standard parser, UTC).
func NewScheduler(o SchedulerOptions) (*Scheduler, error) {
	if o.Runner == nil {
		return nil, errors.New("retention: scheduler needs a runner")
	}
	sched, err := cron.ParseStandard(o.Spec)
	if err != nil {
		return nil, fmt.Errorf("retention: schedule %q: %w", o.Spec, err)
	}
	s := &Scheduler{
		runner:    o.Runner,
		spec:      o.Spec,
		sched:     sched,
		runMissed: o.RunMissed,
		clock:     o.Clock,
		log:       o.Logger,
		metrics:   o.Metrics,
		auditPath: o.AuditPath,
	}
	if s.clock == nil {
		s.clock = SystemClock{}
	}
	if s.log == nil {
		s.log = o.Runner.log
	}
	if s.metrics == nil {
		s.metrics = o.Runner.metrics
	}
	if s.auditPath == "" {
		s.auditPath = o.Runner.cfg.AuditPath
	}
	return s, nil
}

// Next returns the time of the next scheduled run (UTC).
func (s *Scheduler) Next() time.Time {
	if ns := s.next.Load(); ns != 0 {
		return time.Unix(0, ns).UTC()
	}
	return s.sched.Next(s.clock.Now().UTC())
}

// Start starts the schedule loop; it returns at once. The loop and its runs
// end when ctx ends or Stop is called. Starting twice does nothing.
func (s *Scheduler) Start(ctx context.Context) {
	s.life.Start(ctx, func() {
		s.metrics.Enabled.Set(1)
		if s.runner.cfg.DryRun {
			s.metrics.DryRun.Set(1)
		}
	}, s.loop)
}

// Stop ends the loop and cancels the run going, if any: it stops at its
// next batch boundary, writes an interrupted footer and releases the lease.
// Stop waits for all of that.
func (s *Scheduler) Stop() {
	s.life.Stop()
	s.metrics.Enabled.Set(0)
	s.metrics.DryRun.Set(0)
}

func (s *Scheduler) loop(ctx context.Context) {
	defer s.runs.Wait() // Stop returns once the run going has ended
	s.log.Info("retention_scheduler_started", "cron", s.spec, "next_run", s.sched.Next(s.clock.Now().UTC()))
	if s.runMissed && s.missed() {
		s.fire(ctx, TriggerStartup)
	}
	coming := func(next time.Time) { s.next.Store(next.UnixNano()) }
	if !EveryTick(ctx, s.clock, s.sched, coming, func() { s.fire(ctx, TriggerSchedule) }) {
		s.log.Warn("retention_scheduler_no_next_run", "cron", s.spec)
		<-ctx.Done()
		return
	}
	s.log.Info("retention_scheduler_stopped")
}

// EveryTick calls fire at each tick of sched (UTC) on clock until ctx
// ends, and coming, when set, with each tick before it waits for it. It
// returns true when ctx ended, false at once when the schedule has no
// coming tick. The backup scheduler runs on it too.
func EveryTick(ctx context.Context, clock Clock, sched cron.Schedule, coming func(time.Time), fire func()) bool {
	var last time.Time
	for {
		now := clock.Now().UTC()
		next := sched.Next(later(now, last))
		if next.IsZero() {
			return false
		}
		if coming != nil {
			coming(next)
		}
		t := clock.NewTimer(next.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return true
		case <-t.C():
		}
		last = next
		fire()
	}
}

// later returns the later of two times, so a clock that reads a little
// early after a tick never fires the same tick twice.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// missed reports whether a scheduled run should have happened since the
// last run started (systemd's Persistent=true). With no run on record it
// reports false: a fresh installation waits for its first tick.
func (s *Scheduler) missed() bool {
	// The database's own runs: a copy's sharing the trail are not (spec §10.1).
	dbID, err := s.runner.st.DatabaseID(context.Background(), false)
	if err != nil {
		s.metrics.countError(stageSchedule)
		s.log.Warn("retention_last_run_unreadable", "audit_path", s.auditPath, "err", err)
		return false
	}
	last, err := audit.LastRunOf(s.auditPath, dbID)
	if errors.Is(err, fs.ErrNotExist) {
		return false // no audit folder yet: no run on record
	}
	if err != nil {
		s.metrics.countError(stageSchedule)
		s.log.Warn("retention_last_run_unreadable", "audit_path", s.auditPath, "err", err)
		return false
	}
	if last == nil {
		return false
	}
	now := s.clock.Now().UTC()
	due := s.sched.Next(last.Header.StartedAt.UTC())
	if due.IsZero() || due.After(now) {
		return false
	}
	s.log.Info("retention_run_missed", "last_run_id", last.RunID, "last_started_at", last.Header.StartedAt, "missed_at", due)
	return true
}

// fire starts a run unless one is going. The loop does not wait for it, so
// later ticks are seen (and skipped) while it runs.
func (s *Scheduler) fire(ctx context.Context, trigger string) {
	if !s.running.CompareAndSwap(false, true) {
		s.metrics.TicksSkipped.Inc()
		s.log.Warn("retention_tick_skipped", "trigger", trigger, "reason", "previous run still going")
		if h := s.hooks.tickSkipped; h != nil {
			h()
		}
		return
	}
	if h := s.hooks.runFired; h != nil {
		h(trigger)
	}
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		res, err := s.runOnce(ctx, trigger) // never panics
		s.running.Store(false)
		if h := s.hooks.runDone; h != nil {
			h(trigger, res, err)
		}
	}()
}

// runOnce runs and turns a panic into an error, so one bad run never takes
// the scheduler (or the server) down. The runner's deferred cleanup has
// released the lease by the time the panic reaches here. A panic raised
// inside Pebble is the exception: it stops the process (store.Fatal).
func (s *Scheduler) runOnce(ctx context.Context, trigger string) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.runner.panicked(trigger, p, debug.Stack())
			err = fmt.Errorf("retention run panicked: %v", p)
		}
	}()
	res, err = s.runner.Run(ctx, RunRequest{Trigger: trigger})
	var held *LeaseHeldError
	switch {
	case errors.As(err, &held), errors.Is(err, ErrPaused):
		// Logged and counted by the runner; the next tick tries again.
	case err != nil:
		s.log.Error("retention_scheduled_run_failed", "trigger", trigger, "run_id", res.RunID, "err", err)
	}
	return res, err
}
