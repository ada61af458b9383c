package retention

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
)

func (e *env) service(r *Runner, s *Scheduler) *Manager {
	e.t.Helper()
	m, err := NewService(ServiceOptions{Runner: r, Scheduler: s, Logger: e.logger, Now: e.clock.Now})
	if err != nil {
		e.t.Fatalf("NewService: %v", err)
	}
	e.t.Cleanup(m.Close)
	return m
}

func TestServiceRunAndStatus(t *testing.T) {
	e := newEnv(t)
	e.cfg.MessagePeriod = 36 * time.Hour
	e.dueThread("t1", 1, 1)
	r := e.runner()
	s, _ := e.scheduler(r, e.cfg.Cron, false)
	svc := e.service(r, s)

	res, err := svc.Run(context.Background(), RunRequest{Trigger: TriggerAdmin})
	if err != nil || res.Purged != 1 || res.Status != audit.RunCompleted {
		t.Fatalf("run: %+v %v", res, err)
	}
	st, err := svc.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !st.Enabled || st.DryRun || st.Period != "30d" || st.MessagePeriod != "1d12h" || st.Cron != "0 2 * * *" {
		t.Fatalf("status config %+v", st)
	}
	if st.NextRun.IsZero() || !st.NextRun.Equal(time.Date(2025, 3, 2, 2, 0, 0, 0, time.UTC)) {
		t.Fatalf("next run %v", st.NextRun)
	}
	if st.Lease.Owner != r.owner || st.Lease.Held {
		t.Fatalf("lease %+v after the run, want ours and released", st.Lease)
	}
	if st.LastRun == nil || st.LastRun.RunID != res.RunID || st.LastRun.AuditFile != res.AuditFile {
		t.Fatalf("last run %+v, want %+v", st.LastRun, res)
	}
}

// With retention disabled (no scheduler), admin runs still run: the
// switch is the scheduler's.
func TestServiceRunsByHandWhileDisabled(t *testing.T) {
	e := newEnv(t)
	e.cfg.Enabled = false
	svc := e.service(e.runner(), nil)
	ctx := context.Background()
	if res, err := svc.Run(ctx, RunRequest{DryRun: true, Trigger: TriggerAdmin}); err != nil || !res.DryRun {
		t.Fatalf("dry run: %+v %v", res, err)
	}
	res, err := svc.Run(ctx, RunRequest{Trigger: TriggerAdmin})
	if err != nil || res.DryRun || res.Status != "completed" {
		t.Fatalf("Run: %+v %v, want a real run", res, err)
	}
	st, err := svc.Status(ctx)
	if err != nil || st.Enabled || !st.NextRun.IsZero() || st.LastRun == nil || st.LastRun.RunID != res.RunID {
		t.Fatalf("status %+v %v", st, err)
	}
}

func TestServiceStartRunsDetachedFromTheRequest(t *testing.T) {
	e := newEnv(t)
	e.dueThread("t1", 1, 1)
	r := e.runner()
	svc := e.service(r, nil)

	ctx, cancel := context.WithCancel(context.Background())
	id, err := svc.Start(ctx, RunRequest{Trigger: TriggerAdmin})
	cancel() // the HTTP request ends at once
	if err != nil || len(id) != 12 {
		t.Fatalf("Start: %q %v", id, err)
	}
	svc.wg.Wait()
	last := r.LastResult()
	if last == nil || last.RunID != id || last.Status != audit.RunCompleted || last.Purged != 1 {
		t.Fatalf("background run: %+v", last)
	}
}

func TestServiceStartAnswersLeaseHeldAtOnce(t *testing.T) {
	e := newEnv(t)
	other, err := AcquireLease(context.Background(), LeaseConfig{
		Path: e.cfg.LeasePath, TTL: time.Hour, Owner: "elsewhere/9/0009", Host: "elsewhere", PID: 9, Now: e.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	svc := e.service(e.runner(), nil)
	_, err = svc.Start(context.Background(), RunRequest{Trigger: TriggerAdmin})
	var held *LeaseHeldError
	if !errors.As(err, &held) || held.Holder.Owner != "elsewhere/9/0009" {
		t.Fatalf("Start: %v, want *LeaseHeldError", err)
	}
	st, err := svc.Status(context.Background())
	if err != nil || !st.Lease.Held || st.Lease.Owner != "elsewhere/9/0009" {
		t.Fatalf("status lease %+v %v", st.Lease, err)
	}
	if len(e.auditFiles()) != 0 {
		t.Fatal("a refused run wrote an audit file")
	}
}

func TestServiceCloseInterruptsBackgroundRuns(t *testing.T) {
	e := newEnv(t)
	e.cfg.BatchSize = 2
	e.dueThread("t1", 3, 2)
	r := e.runner()
	reached := make(chan struct{})
	var once sync.Once
	r.hooks.beforeBatch = func(ctx context.Context, b batchPoint) {
		once.Do(func() { close(reached) })
		<-ctx.Done()
	}
	svc := e.service(r, nil)
	id, err := svc.Start(context.Background(), RunRequest{Trigger: TriggerAdmin})
	if err != nil {
		t.Fatal(err)
	}
	<-reached
	if st, err := svc.Status(context.Background()); err != nil || !st.Lease.Held || st.Lease.Owner != r.owner {
		t.Fatalf("status lease during the run: %+v %v", st.Lease, err)
	}
	// While it runs, a second run in this process is refused.
	var held *LeaseHeldError
	if _, err := svc.Run(context.Background(), RunRequest{Trigger: TriggerAdmin}); !errors.As(err, &held) {
		t.Fatalf("overlapping Run: %v, want *LeaseHeldError", err)
	}
	svc.Close()
	last := r.LastResult()
	if last == nil || last.RunID != id || last.Status != audit.RunInterrupted {
		t.Fatalf("closed run: %+v", last)
	}
	if _, err := svc.Start(context.Background(), RunRequest{Trigger: TriggerAdmin}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
}

func TestStatusFromDiskAlone(t *testing.T) {
	e := newEnv(t)
	e.dueThread("t1", 1, 1)
	res, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})

	// A fresh service (a restarted server) and the CLI read the last run from the audit folder.
	fresh := e.service(e.runner(), nil)
	st, err := fresh.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ReadStatus(e.cfg, e.clock.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]Status{"service": st, "ReadStatus": cli} {
		lr := s.LastRun
		if lr == nil || lr.RunID != res.RunID || lr.Status != audit.RunCompleted || lr.Purged != 1 ||
			lr.KeysDeleted != res.KeysDeleted || lr.AuditFile != res.AuditFile || !lr.StartedAt.Equal(res.StartedAt.Time) {
			t.Fatalf("%s last run %+v, want %+v", name, lr, res)
		}
		// Rebuilt from the audit file's items after a restart.
		if len(res.ByCause) == 0 || !reflect.DeepEqual(lr.ByCause, res.ByCause) {
			t.Fatalf("%s last run by cause %+v, want %+v", name, lr.ByCause, res.ByCause)
		}
	}
	// No scheduler runs for ReadStatus, so it names no next run.
	if !cli.NextRun.IsZero() {
		t.Fatalf("ReadStatus next run %v", cli.NextRun)
	}
}

func TestStatusWithNothingOnDisk(t *testing.T) {
	e := newEnv(t)
	st, err := ReadStatus(e.cfg, e.clock.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	if st.LastRun != nil || st.Lease.Owner != "" || st.Lease.Held {
		t.Fatalf("status %+v", st)
	}
}

// A damaged newest audit file is reported in the status, not as an error
// (which the API would answer with 500 and the CLI with exit 1).
func TestStatusReportsADamagedNewestFile(t *testing.T) {
	e := newEnv(t)
	res, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	data, err := os.ReadFile(res.AuditFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(res.AuditFile, data[:len(data)/2], 0o640); err != nil { // footer gone
		t.Fatal(err)
	}
	st, err := e.service(e.runner(), nil).Status(context.Background())
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	cli, err := ReadStatus(e.cfg, e.clock.Now(), "")
	if err != nil {
		t.Fatalf("ReadStatus: %v", err)
	}
	for name, s := range map[string]Status{"service": st, "ReadStatus": cli} {
		lr := s.LastRun
		if lr == nil || lr.Status != statusDamaged || lr.AuditFile != res.AuditFile || lr.RunID != res.RunID ||
			!strings.Contains(lr.Error, filepath.Base(res.AuditFile)) {
			t.Errorf("%s last run %+v", name, lr)
		}
	}
}

// A file left in progress by a dead run, while nobody holds the lease, is
// not reported as running; Recover seals it even with retention disabled,
// and takes no lease when there is nothing to seal.
func TestStatusAndRecoverOfAnAbandonedFile(t *testing.T) {
	e := newEnv(t)
	e.cfg.Enabled = false
	if err := os.MkdirAll(e.cfg.AuditPath, 0o750); err != nil {
		t.Fatal(err)
	}
	r := e.runner()
	if sealed, err := r.Recover(context.Background()); err != nil || len(sealed) != 0 {
		t.Fatalf("Recover with nothing in progress = %v, %v", sealed, err)
	}
	if _, err := os.Lstat(e.cfg.LeasePath); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Recover with nothing to seal took the lease: %v", err)
	}
	if _, err := audit.Create(e.cfg.AuditPath, "dead01", audit.Header{StartedAt: e.clock.Now().Add(-time.Hour), Owner: "gone", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	st, err := ReadStatus(e.cfg, e.clock.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	if lr := st.LastRun; lr == nil || lr.RunID != "dead01" || lr.Status != audit.RunAborted || lr.Error != reasonNotSealed {
		t.Fatalf("last run of a dead run: %+v", lr)
	}
	sealed, err := r.Recover(context.Background())
	if err != nil || len(sealed) != 1 {
		t.Fatalf("Recover = %v, %v", sealed, err)
	}
	rep, err := audit.VerifyDir(e.cfg.AuditPath)
	if err != nil || len(rep.Problems) != 0 || rep.Verified != 1 {
		t.Fatalf("after Recover: %+v, %v", rep, err)
	}
}
