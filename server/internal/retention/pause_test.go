package retention

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

func TestPausedRunsAreSkippedButDryRunsWork(t *testing.T) {
	e := newEnv(t)
	e.thread("t1", 1, 1)
	e.deleteThread("t1")
	e.at(31 * day)
	r := e.runner()
	ctx := context.Background()

	st, err := r.SetPause(ctx, true, "incident 42")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Paused || st.Reason != "incident 42" || st.PausedAt.IsZero() || !st.PausedAt.Equal(e.clock.Now()) {
		t.Fatalf("pause state %+v", st)
	}
	if got := counterValue(t, e.metrics.Paused); got != 1 {
		t.Fatalf("paused gauge %v", got)
	}
	if _, err := r.Run(ctx, RunRequest{Trigger: TriggerSchedule}); !errors.Is(err, ErrPaused) {
		t.Fatalf("paused run: err %v, want ErrPaused", err)
	}
	if got := counterValue(t, e.metrics.Runs.WithLabelValues(resultPaused)); got != 1 {
		t.Fatalf("runs_total{paused} = %v", got)
	}
	if files := e.auditFiles(); len(files) != 0 {
		t.Fatalf("a skipped run wrote %v", files)
	}

	// A dry run previews while paused.
	_, ra := e.run(r, RunRequest{DryRun: true, Trigger: TriggerCLI})
	if it := ra.item(t, "t1"); it.Status != audit.StatusDryRun {
		t.Fatalf("dry run record %+v", it)
	}

	// The switch is in the database: a new store on the same files sees it.
	if err := e.st.Close(); err != nil {
		t.Fatal(err)
	}
	e.st, err = store.Open(filepath.Join(e.dir, "db"), store.Options{Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.st.Close() })
	r = e.runner()
	status, err := newTestService(t, r).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !status.Paused || status.Reason != "incident 42" || status.PausedAt.IsZero() {
		t.Fatalf("status after reopen %+v", status)
	}
	if _, err := r.Run(ctx, RunRequest{Trigger: TriggerSchedule}); !errors.Is(err, ErrPaused) {
		t.Fatalf("paused run after reopen: %v", err)
	}

	st, err = r.SetPause(ctx, false, "")
	if err != nil || st.Paused || !st.PausedAt.IsZero() || st.Reason != "" {
		t.Fatalf("resume: %+v %v", st, err)
	}
	if got := counterValue(t, e.metrics.Paused); got != 0 {
		t.Fatalf("paused gauge after resume %v", got)
	}
	_, ra = e.run(r, RunRequest{Trigger: TriggerSchedule})
	if it := ra.item(t, "t1"); it.Status != audit.StatusPurged {
		t.Fatalf("after resume %+v", it)
	}
}

func TestPauseStopsARunAtTheNextBatchBoundary(t *testing.T) {
	ctx := context.Background()
	stopAtSecondBatch(t, ctx, func(r *Runner) {
		if _, err := r.SetPause(ctx, true, "maintenance"); err != nil {
			t.Error(err)
		}
	}, func(reason string) bool { return reason == reasonPaused }, func(r *Runner) {
		if _, err := r.SetPause(ctx, false, ""); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRepeatedPauseKeepsItsFirstTime(t *testing.T) {
	e := newEnv(t)
	r := e.runner()
	ctx := context.Background()
	first, err := r.SetPause(ctx, true, "a")
	if err != nil {
		t.Fatal(err)
	}
	e.at(day)
	again, err := r.SetPause(ctx, true, "b")
	if err != nil {
		t.Fatal(err)
	}
	if !again.PausedAt.Equal(first.PausedAt.Time) || again.Reason != "b" {
		t.Fatalf("first %+v, again %+v", first, again)
	}
	if _, err := r.SetPause(ctx, true, string(make([]byte, store.MaxPauseReason+1))); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("long reason: %v", err)
	}
}

// newTestService wraps r in a service without a scheduler.
func newTestService(t *testing.T, r *Runner) *Manager {
	t.Helper()
	m, err := NewService(ServiceOptions{Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}
