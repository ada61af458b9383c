package backup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/startstop"
)

// SchedulerOptions configure NewScheduler.
type SchedulerOptions struct {
	// Creator makes the backups, into its Path (BACKUP_PATH, required),
	// through CreateInPath as POST /admin/backups does; its metrics count
	// the scheduled runs.
	Creator *Creator
	Spec    string        // BACKUP_CRON: 5-field cron or descriptor, UTC
	Keep    time.Duration // BACKUP_KEEP: older backups are deleted
	Clock   retention.Clock
	Logger  *slog.Logger
}

// Scheduler makes a backup into BACKUP_PATH on a cron schedule and then
// deletes the backups there older than KEEP. Backups run in its loop, one
// at a time: a tick that comes while one is written is not fired.
type Scheduler struct {
	c     *Creator
	spec  string
	sched cron.Schedule
	keep  time.Duration
	clock retention.Clock
	log   *slog.Logger

	// newest is the newest backup's time when Start ran (zero: none).
	newest time.Time

	life startstop.Base

	// done, when set (tests), is called after every scheduled run.
	done func(RunResult)
}

// RunResult is what one scheduled run did.
type RunResult struct {
	Manifest Manifest
	File     string
	Expired  Expired
	Err      error // the backup's or the expiry's
}

// intervalTicks is how many coming ticks Interval looks over: enough to
// see a weekly pattern in a daily schedule.
const intervalTicks = 64

// NewScheduler parses the schedule (robfig/cron's standard parser, UTC,
// like the retention scheduler).
func NewScheduler(o SchedulerOptions) (*Scheduler, error) {
	if o.Creator == nil || o.Creator.Path() == "" {
		return nil, fmt.Errorf("backup scheduler: %w", ErrNoBackupPath)
	}
	if o.Keep <= 0 {
		return nil, errors.New("backup scheduler: keep must be positive")
	}
	sched, err := cron.ParseStandard(o.Spec)
	if err != nil {
		return nil, fmt.Errorf("backup scheduler: schedule %q: %w", o.Spec, err)
	}
	s := &Scheduler{c: o.Creator, spec: o.Spec, sched: sched, keep: o.Keep, clock: o.Clock, log: o.Logger}
	if s.clock == nil {
		s.clock = retention.SystemClock{}
	}
	if s.log == nil {
		s.log = o.Creator.log
	}
	return s, nil
}

// Interval is the longest gap between two of the coming scheduled backups
// (progressdb_backup_interval_seconds): the alert on missing backups waits
// two of them.
func (s *Scheduler) Interval() time.Duration {
	var longest time.Duration
	t := s.sched.Next(s.clock.Now().UTC())
	for range intervalTicks {
		n := s.sched.Next(t)
		if n.IsZero() || t.IsZero() {
			break
		}
		longest = max(longest, n.Sub(t))
		t = n
	}
	return longest
}

// Start restores the last success time from the newest backup in the
// folder, so a restart does not reset the alert's clock (call it before
// the creator makes backups), and starts the loop, which first deletes
// what expired while the server was down and makes the backup it missed
// meanwhile, if any. It returns at once. Starting twice does nothing.
func (s *Scheduler) Start(ctx context.Context) {
	s.life.Start(ctx, func() {
		s.restoreLastSuccess()
		s.c.metrics.Interval.Set(s.Interval().Seconds())
	}, s.loop)
}

// Stop ends the loop; a backup being written is cancelled (its temporary
// file removed) and Stop waits for that.
func (s *Scheduler) Stop() {
	s.life.Stop()
	s.c.metrics.Interval.Set(0)
}

func (s *Scheduler) loop(ctx context.Context) {
	s.log.Info("backup_scheduler_started", "cron", s.spec, "path", s.c.Path(), "keep", s.keep,
		"next_run", s.sched.Next(s.clock.Now().UTC()))
	if _, err := s.expire(); err != nil {
		s.log.Error("backup_expire_failed", "path", s.c.Path(), "err", err)
	}
	if due, ok := s.missed(s.clock.Now().UTC()); ok {
		s.log.Info("backup_run_missed", "last_backup_at", s.newest, "missed_at", due)
		s.fire(ctx)
	}
	if !retention.EveryTick(ctx, s.clock, s.sched, nil, func() { s.fire(ctx) }) {
		s.log.Warn("backup_scheduler_no_next_run", "cron", s.spec)
		<-ctx.Done()
		return
	}
	s.log.Info("backup_scheduler_stopped")
}

func (s *Scheduler) fire(ctx context.Context) {
	res := s.Run(ctx)
	if h := s.done; h != nil {
		h(res)
	}
}

// missed reports whether a scheduled backup fell due since the newest
// backup in the folder, while the server was down (systemd's
// Persistent=true): it is made at start rather than a period late. With
// no backup on record a fresh installation waits for its first tick.
func (s *Scheduler) missed(now time.Time) (time.Time, bool) {
	if s.newest.IsZero() {
		return time.Time{}, false
	}
	due := s.sched.Next(s.newest.UTC())
	return due, !due.IsZero() && !due.After(now)
}

// Run is one scheduled run: a backup into BACKUP_PATH, then the expiry.
// The expiry runs after a failed backup too: how long purged content
// survives in backups must not depend on new backups succeeding. A panic
// is turned into an error, so one bad run never takes the server down.
func (s *Scheduler) Run(ctx context.Context) (res RunResult) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("backup_run_panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			res.Err = errors.Join(res.Err, fmt.Errorf("backup run panicked: %v", p))
		}
	}()
	var err error
	res.Manifest, res.File, err = s.c.CreateInPath(ctx)
	if err != nil {
		res.Err = err // logged and counted by the creator
		if ctx.Err() != nil {
			return res
		}
	}
	var eerr error
	res.Expired, eerr = s.expire()
	if eerr != nil {
		s.log.Error("backup_expire_failed", "path", s.c.Path(), "err", eerr)
		res.Err = errors.Join(res.Err, eerr)
	}
	return res
}

func (s *Scheduler) expire() (Expired, error) {
	return Expire(s.c.Path(), s.keep, s.clock.Now(), s.log)
}

// restoreLastSuccess sets the last success gauge from the newest backup
// in the folder (its manifest's time: a file's time changes when it is
// copied around).
func (s *Scheduler) restoreLastSuccess() {
	held, _, err := Scan(s.c.Path())
	if err != nil {
		s.log.Warn("backup_last_success_unknown", "path", s.c.Path(), "err", err)
		return
	}
	if len(held) == 0 {
		return
	}
	s.newest = held[len(held)-1].Manifest.CreatedAt // Scan sorts by it
	s.c.metrics.LastSuccess.Set(float64(s.newest.UnixNano()) / 1e9)
}
