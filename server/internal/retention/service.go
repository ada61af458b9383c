package retention

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// ServiceOptions configure NewService.
type ServiceOptions struct {
	Runner    *Runner
	Scheduler *Scheduler // nil when retention is disabled
	Logger    *slog.Logger
	Now       func() time.Time // judges lease expiry in Status; time.Now when nil
}

// Manager is the retention Service: runs on demand, background runs and
// status. It shares the runner with the scheduler, so runs started here and
// scheduled runs never overlap in one process.
type Manager struct {
	runner *Runner
	sched  *Scheduler
	log    *slog.Logger
	now    func() time.Time

	// Runs asked for here (Run and Start) live on this context: detached
	// from the request that asked, so a client that hangs up (a proxy
	// timeout) does not stop them; cancelled by Close, at shutdown.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool

	// newest remembers the newest month folder's listing for Status, so
	// that a status costs the same however many runs the month holds.
	newest audit.NewestRun
}

var _ Service = (*Manager)(nil)

// ErrClosed is returned by Run and Start after Close.
var ErrClosed = errors.New("retention service closed")

// NewService returns the service over runner (and scheduler, when retention is enabled).
func NewService(o ServiceOptions) (*Manager, error) {
	if o.Runner == nil {
		return nil, errors.New("retention: service needs a runner")
	}
	m := &Manager{runner: o.Runner, sched: o.Scheduler, log: o.Logger, now: o.Now}
	if m.log == nil {
		m.log = o.Runner.log
	}
	if m.now == nil {
		m.now = time.Now
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

// StartScheduler starts the scheduler, if there is one, until ctx ends or Close.
func (m *Manager) StartScheduler(ctx context.Context) {
	if m.sched != nil {
		m.sched.Start(ctx)
	}
}

// Recover seals audit files left in progress by a crashed process (see
// Runner.Recover); the server calls it at start.
func (m *Manager) Recover(ctx context.Context) ([]string, error) { return m.runner.Recover(ctx) }

// RecordRaises writes the format raises the database owes the audit trail
// (see Runner.RecordRaises); the workflows that seal call it when they end.
func (m *Manager) RecordRaises(ctx context.Context) error { return m.runner.RecordRaises(ctx) }

// RestoreLastSuccess sets progressdb_retention_last_success_timestamp_seconds
// from the audit folder (the newest completed run that was not a dry run)
// and returns when that run finished, zero when there was none. The server
// calls it at start.
func (m *Manager) RestoreLastSuccess() (time.Time, error) { return m.runner.restoreLastSuccess() }

// Close stops the scheduler and cancels the runs going (scheduled, waited
// for, background); each stops at its next batch boundary with an
// interrupted footer. Close waits for them, so the store can be closed
// after it. Calling it again, or from several goroutines, is safe.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	if m.sched != nil {
		m.sched.Stop()
	}
	m.cancel()
	m.wg.Wait()
}

// Run runs now and waits (spec §7 POST /admin/retention/run). ctx only
// bounds taking the lease: the run itself ends with Close, like a
// scheduled one, not with the caller.
func (m *Manager) Run(ctx context.Context, req RunRequest) (Result, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return Result{}, ErrClosed
	}
	rn, res, err := m.runner.begin(ctx, req)
	if err != nil {
		m.mu.Unlock()
		return res, err
	}
	m.wg.Add(1)
	m.mu.Unlock()
	defer m.wg.Done()
	return rn.execute(m.ctx)
}

// Pause reads the pause switch (and refreshes the paused gauge).
func (m *Manager) Pause(ctx context.Context) (PauseState, error) { return m.runner.Pause(ctx) }

// SetPause pauses or resumes retention (spec §3.2 PUT /admin/retention/pause).
func (m *Manager) SetPause(ctx context.Context, paused bool, reason string) (PauseState, error) {
	return m.runner.SetPause(ctx, paused, reason)
}

// ThreadPolicy returns a thread's override and effective policy.
func (m *Manager) ThreadPolicy(ctx context.Context, tid string) (ThreadPolicy, error) {
	return m.runner.ThreadPolicy(ctx, tid)
}

// SetThreadPolicy replaces a thread's override.
func (m *Manager) SetThreadPolicy(ctx context.Context, tid string, o PolicyOverride) (ThreadPolicy, error) {
	return m.runner.SetThreadPolicy(ctx, tid, o)
}

// ClearThreadPolicy removes a thread's override.
func (m *Manager) ClearThreadPolicy(ctx context.Context, tid string) error {
	return m.runner.ClearThreadPolicy(ctx, tid)
}

// Start takes the lease now, so that a held lease can be answered with
// 409, and runs in the background. It returns the run ID.
func (m *Manager) Start(ctx context.Context, req RunRequest) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return "", ErrClosed
	}
	rn, _, err := m.runner.begin(ctx, req)
	if err != nil {
		return "", err
	}
	m.background(rn, req.Trigger)
	return rn.id, nil
}

// background executes a begun run in its own goroutine, which Close waits
// for. Call it with m.mu held. Failures are logged and counted by the
// runner and show in Status.
func (m *Manager) background(rn *run, trigger string) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer func() {
			if p := recover(); p != nil {
				m.runner.panicked(trigger, p, debug.Stack())
			}
		}()
		_, _ = rn.execute(m.ctx)
	}()
}

// Status reports configuration, next run, lease and last run.
func (m *Manager) Status(ctx context.Context) (Status, error) {
	var next wire.Time
	if m.sched != nil && m.runner.cfg.Enabled {
		next = wire.At(m.sched.Next())
	}
	st, err := status(m.runner.cfg, m.now(), next)
	if err != nil {
		return st, err
	}
	if st.PauseState, err = m.runner.Pause(ctx); err != nil {
		return st, err
	}
	if last := m.runner.LastResult(); last != nil {
		st.LastRun = last
		return st, nil
	}
	dbID, err := m.runner.st.DatabaseID(ctx, false)
	if err != nil {
		return st, err
	}
	st.LastRun, err = lastRunFromAudit(m.runner.cfg, m.now(), dbID, &m.newest)
	return st, err
}

// ReadStatus builds the status from the configuration, the lease file and
// the audit folder alone, for `progressdb retention status` when no server
// holds the database. No scheduler runs then, so there is no next run: a
// schedule's next time depends on when a server starts (`@every`) and on
// that server's configuration, not the caller's. The last run is the
// database dbID's own ("" when it is not known: any run of the trail).
func ReadStatus(cfg config.Retention, now time.Time, dbID string) (Status, error) {
	cfg, err := normalize(cfg)
	if err != nil {
		return Status{}, err
	}
	st, err := status(cfg, now, wire.Time{})
	if err != nil {
		return st, err
	}
	st.LastRun, err = lastRunFromAudit(cfg, now, dbID, &audit.NewestRun{})
	return st, err
}

// status fills the configuration and lease parts of Status.
func status(cfg config.Retention, now time.Time, next wire.Time) (Status, error) {
	st := Status{
		Enabled:       cfg.Enabled,
		DryRun:        cfg.DryRun,
		Period:        config.FormatDuration(cfg.Period),
		MessagePeriod: config.FormatDuration(cfg.MessagePeriod),
		Cron:          cfg.Cron,
		NextRun:       next,
		MaxAge:        formatAge(cfg.MaxAge),
		MaxMessages:   cfg.MaxMessages,
	}
	info, err := ReadLease(cfg.LeasePath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		st.Lease.State = LeaseNone // never taken
	case err != nil:
		return st, fmt.Errorf("read lease: %w", err)
	default:
		st.Lease = leaseStatus(info, now)
	}
	return st, nil
}

// Statuses of last_run beyond the footer's.
const (
	statusRunning = "running" // in progress, and its run holds the lease
	statusDamaged = "damaged" // the newest audit file cannot be read as a run
)

// reasonNotSealed explains a dead run's file that is still in progress.
const reasonNotSealed = "run did not finish (process ended); its audit file is sealed at the next start or run"

// lastRunFromAudit describes the newest audit file of the database dbID's
// own runs as a Result: the runs of other databases sharing the trail (a
// copy restored from it, its restore's replay) are not its own. A damaged
// newest file is reported in the result (status "damaged", error naming
// file, line and reason), not as an error: the status must stay readable
// when the audit folder needs attention. An in-progress file whose run no
// longer holds the lease is reported as aborted, which its seal will say.
// newest finds the newest file.
func lastRunFromAudit(cfg config.Retention, now time.Time, dbID string, newest *audit.NewestRun) (*Result, error) {
	sum, err := newest.LastRunOf(cfg.AuditPath, dbID)
	var problem *audit.Problem
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case errors.As(err, &problem):
		res := &Result{Status: statusDamaged, AuditFile: problem.File, Error: problem.Error()}
		res.StartedAt.Time, res.RunID, _ = audit.ParseName(problem.File)
		return res, nil
	case err != nil || sum == nil:
		return nil, err
	}
	res := &Result{
		RunID:     sum.RunID,
		StartedAt: wire.At(sum.Header.StartedAt),
		DryRun:    sum.Header.DryRun,
		Status:    statusRunning,
		AuditFile: sum.Path,
	}
	// The footer has no breakdown by cause; the items have. A file that
	// cannot be read again leaves it out rather than the whole status.
	if bc, err := audit.CountCauses(sum.Path); err == nil && len(bc) > 0 {
		res.ByCause = bc
	}
	if f := sum.Footer; f != nil {
		res.FinishedAt = wire.At(f.FinishedAt)
		res.Status = f.Status
		res.Scanned, res.Eligible, res.Purged = f.Scanned, f.Eligible, f.Purged
		res.Failed, res.Skipped, res.Stamped, res.KeysDeleted = f.Failed, f.Skipped, f.Stamped, f.KeysDeleted
		if f.Status != audit.RunCompleted {
			res.Error = f.Reason
		}
	} else if live := LiveRun(cfg.LeasePath, now); live == nil || !live(sum.Header) {
		res.Status, res.Error = audit.RunAborted, reasonNotSealed
	}
	return res, nil
}

// Hold waits until no run is going and keeps runs from starting until
// release is called (Runner.Hold): a backup takes its checkpoint in
// between.
func (m *Manager) Hold(ctx context.Context) (audit.Head, func(), error) { return m.runner.Hold(ctx) }
