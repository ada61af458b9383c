package retention

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// oldTrail writes n sealed files, an hour apart, in the months before t0.
func oldTrail(t *testing.T, root string, n int) {
	t.Helper()
	start := t0.AddDate(0, -2, 0)
	for i := range n {
		at := start.Add(time.Duration(i) * time.Hour)
		w, err := audit.Create(root, fmt.Sprintf("old%03d", i), audit.Header{StartedAt: at, Cutoff: at.Add(-30 * day)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Close(audit.Footer{FinishedAt: at.Add(time.Second), Status: audit.RunCompleted}); err != nil {
			t.Fatal(err)
		}
	}
}

// putUnreadable puts a file before the old trail that no reader can read
// (its one line is longer than audit.MaxLineSize): a reader that reaches
// it fails, so one that does not never read the trail's old part.
func putUnreadable(t *testing.T, root string) {
	t.Helper()
	bad := filepath.Join(root, "2024-01", "retention-20240101T000000Z-old.jsonl")
	if err := os.MkdirAll(filepath.Dir(bad), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, append(bytes.Repeat([]byte("x"), audit.MaxLineSize+10), '\n'), 0o640); err != nil {
		t.Fatal(err)
	}
}

// A trail of any age: a run, a restore's replay and a start's catch-up read
// it from the database's head on (the old part, unreadable here, is never
// read), and still refuse, replaying nothing, a trail broken after the
// head (spec §5 Cost, §10).
func TestAnchoredReplayAndCatchUpRefuseABrokenTrail(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	oldTrail(t, e.cfg.AuditPath, 20)
	e.content("a", 1)
	e.content("b", 1)
	// The new database's first run settles over the old trail (it lacks
	// none of it); from then on the old part is not read again.
	e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	putUnreadable(t, e.cfg.AuditPath)
	whole, broken := e.copyDB("whole"), e.copyDB("broken")
	e.deleteThread("a")
	e.at(31 * day)
	lost, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	e.deleteThread("b")
	e.at(62 * day)
	if res, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI}); res.Purged != 1 || lost.Purged != 1 {
		t.Fatalf("runs purged %d and %d, want 1 each", lost.Purged, res.Purged)
	}

	// Whole after the head: the replay reads it and purges both.
	e.at(62*day + time.Second)
	_, r := e.restored(whole)
	rep, err := r.Run(ctx, RunRequest{Trigger: audit.TriggerRestore})
	if err != nil || rep.Status != audit.RunCompleted || rep.Purged != 2 {
		t.Fatalf("replay over a whole trail: %v %+v", err, rep)
	}

	// A file after the head goes missing: the catch-up and the replay
	// refuse, and nothing is purged.
	if err := os.Remove(lost.AuditFile); err != nil {
		t.Fatal(err)
	}
	e.at(62*day + 2*time.Second)
	st, r := e.restored(broken)
	svc, err := NewService(ServiceOptions{Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if res, err := svc.CatchUp(ctx, false); !errors.Is(err, ErrBrokenTrail) {
		t.Fatalf("catch-up over a broken trail: %v %+v", err, res)
	}
	e.at(62*day + 3*time.Second)
	if rep, err := r.Run(ctx, RunRequest{Trigger: audit.TriggerRestore}); !errors.Is(err, ErrBrokenTrail) || rep.Purged != 0 {
		t.Fatalf("replay over a broken trail: %v %+v", err, rep)
	}
	for _, tid := range []string{"a", "b"} {
		if ok, _ := st.ItemExists(ctx, store.KindThread, tid); !ok {
			t.Fatalf("thread %s purged over a broken trail", tid)
		}
	}
}
