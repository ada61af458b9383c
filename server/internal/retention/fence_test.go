package retention

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// fencedRunner is the env's runner as a cluster builds it for shard 3:
// its writes carry the lease's epoch.
func (e *env) fencedRunner() *Runner {
	e.t.Helper()
	shard := 3
	r, err := NewRunner(RunnerOptions{Store: e.st, Config: e.cfg, Logger: e.logger, Metrics: e.metrics,
		Clock: e.clock, Host: "test-host", PID: 4242, Version: "test", Fenced: true, Shard: &shard})
	if err != nil {
		e.t.Fatalf("NewRunner: %v", err)
	}
	return r
}

// TestRunFencedByNewerOwner: a run whose lease epoch is older than one the
// shard's database has already seen deletes nothing: its first write (the
// run start record) is refused, and it stops as a run that lost its lease
// does.
func TestRunFencedByNewerOwner(t *testing.T) {
	e := newEnv(t)
	e.thread("a", 3, 2)
	e.deleteThread("a")
	e.at(31 * day)
	// A newer owner (epoch 100) has written to the shard.
	if _, err := e.st.CreateThread(store.WithEpoch(context.Background(), 100),
		store.Thread{ID: "new", Title: "x", Author: "y"}); err != nil {
		t.Fatal(err)
	}

	res, ra := e.run(e.fencedRunner(), RunRequest{Trigger: TriggerCLI})
	if res.Status != audit.RunInterrupted || !strings.Contains(res.Error, reasonLeaseLost) ||
		!strings.Contains(res.Error, "fenced") {
		t.Fatalf("run = %s (%q), want interrupted: lease lost: fenced", res.Status, res.Error)
	}
	if !e.exists(store.KindThread, "a") || res.Purged != 0 {
		t.Fatalf("a fenced run purged: purged=%d", res.Purged)
	}
	for _, it := range ra.Items {
		if it.Status == audit.StatusPurged {
			t.Fatalf("purged record from a fenced run: %+v", it)
		}
	}
	if ra.Header.Epoch >= 100 || ra.Header.Shard == nil || *ra.Header.Shard != 3 {
		t.Fatalf("header epoch %d shard %v, want the run's old epoch and shard 3", ra.Header.Epoch, ra.Header.Shard)
	}
	if got := e.st.Epoch(); got != 100 {
		t.Fatalf("store epoch = %d after a refused run, want 100", got)
	}
}

// TestRunFencedCarriesEpoch: a fenced run that is the newest owner purges
// as usual and leaves its epoch as the newest the database has seen; the
// audit header names the shard. A single node's run writes no fence and no
// shard.
func TestRunFencedCarriesEpoch(t *testing.T) {
	e := newEnv(t)
	e.thread("a", 3, 2)
	e.thread("b", 3, 2)
	e.deleteThread("a")
	e.at(31 * day)

	res, ra := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	if res.Purged != 1 || ra.Header.Shard != nil || e.st.Epoch() != 0 {
		t.Fatalf("single node: purged %d, shard %v, store epoch %d; want 1, none, 0", res.Purged, ra.Header.Shard, e.st.Epoch())
	}
	if strings.Contains(readFile(t, ra.Path), `"shard"`) {
		t.Fatal("single-node audit header names a shard")
	}

	e.deleteThread("b")
	e.at(62 * day)
	res, ra = e.run(e.fencedRunner(), RunRequest{Trigger: TriggerCLI})
	if res.Status != audit.RunCompleted || res.Purged != 1 || e.exists(store.KindThread, "b") {
		t.Fatalf("fenced run = %s purged %d (%s)", res.Status, res.Purged, res.Error)
	}
	if ra.Header.Shard == nil || *ra.Header.Shard != 3 || ra.Header.Epoch <= 0 || e.st.Epoch() != ra.Header.Epoch {
		t.Fatalf("header shard %v epoch %d, store epoch %d", ra.Header.Shard, ra.Header.Epoch, e.st.Epoch())
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
