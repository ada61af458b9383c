package retention

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// footerHash is the hex SHA-256 of a sealed file's last line.
func footerHash(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	sum := sha256.Sum256(lines[len(lines)-1])
	return hex.EncodeToString(sum[:])
}

// The database's head follows the runs that purge it: a real run moves it
// to its own file; a dry run writes nothing; a run over a database behind
// its trail (a purge it lacks: the head and last run started set back, as
// a copy put back by hand has them) leaves it where it is.
func TestRunsAdvanceTheHead(t *testing.T) {
	e := newEnv(t)
	r := e.runner()
	ctx := context.Background()
	head := func() string {
		h, ok, err := e.st.AuditHead(ctx)
		if err != nil || !ok {
			t.Fatalf("head: %v %v", ok, err)
		}
		return h.RunID
	}
	first, _ := e.run(r, RunRequest{Trigger: TriggerCLI})
	if got := head(); got != first.RunID {
		t.Fatalf("head %q after the first run, want %q", got, first.RunID)
	}
	dry, _ := e.run(r, RunRequest{Trigger: TriggerCLI, DryRun: true})
	if got := head(); got != first.RunID {
		t.Fatalf("head %q after the dry run %s, want it unchanged (%s)", got, dry.RunID, first.RunID)
	}
	// A later run follows the dry run's file; nothing between purged.
	e.at(time.Second)
	second, _ := e.run(r, RunRequest{Trigger: TriggerCLI})
	if got := head(); got != second.RunID {
		t.Fatalf("head %q after the second run, want %q", got, second.RunID)
	}

	// A run that purged something, then the database set back to the
	// first run (as a copy put back by hand would be): the next run does
	// not move the head past the purge it lacks.
	e.thread("gone", 1, 1)
	e.deleteThread("gone")
	e.at(31 * day)
	third, _ := e.run(r, RunRequest{Trigger: TriggerCLI})
	if third.Purged == 0 {
		t.Fatalf("third run purged nothing: %+v", third)
	}
	back := audit.HeadOf(e.cfg.AuditPath, first.AuditFile, first.RunID, footerHash(t, first.AuditFile))
	if err := e.st.SetAuditHead(ctx, store.AuditHead(back)); err != nil {
		t.Fatal(err)
	}
	if err := e.st.SetRunStarted(ctx, first.RunID); err != nil {
		t.Fatal(err)
	}
	e.at(31*day + time.Second)
	e.run(r, RunRequest{Trigger: TriggerCLI})
	// It moves over the runs that purged nothing, up to the one whose
	// purges the database lacks.
	if got := head(); got != second.RunID {
		t.Fatalf("head %q, want it at %s, before run %s whose purges the database lacks", got, second.RunID, third.RunID)
	}
}

// A run killed before it recorded itself as the head leaves a database
// that is not behind: its purges are there as far as they went. The next
// start settles the head past it and replays nothing.
func TestKilledRunIsNotLacking(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.thread("a", 1, 1)
	e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	e.deleteThread("a")
	e.at(31 * day)
	second, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	if second.Purged != 1 {
		t.Fatalf("purged %d", second.Purged)
	}
	// As if the run had been killed after its file was sealed, before it
	// recorded the head: the head is the first run's.
	steps, _, err := audit.Steps(e.cfg.AuditPath, audit.Head{})
	if err != nil || len(steps) != 2 {
		t.Fatalf("steps %v %v", steps, err)
	}
	if err := e.st.SetAuditHead(ctx, store.AuditHead(steps[0].Head)); err != nil {
		t.Fatal(err)
	}
	lacks, whole, err := e.runner().Behind(ctx)
	if err != nil || lacks != 0 || !whole {
		t.Fatalf("behind %d %v %v, want nothing lacking", lacks, whole, err)
	}
	if h, _, _ := e.st.AuditHead(ctx); h.RunID != second.RunID {
		t.Fatalf("head %q, want it settled on %q", h.RunID, second.RunID)
	}
}

// Databases sharing one trail do not take each other's runs for purges
// they lack.
func TestSharedTrailOtherDatabase(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	_, r := e.restored(e.copyDB("copy"))
	e.thread("b", 1, 1)
	e.deleteThread("b")
	e.at(31 * day)
	if res, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI}); res.Purged != 1 {
		t.Fatalf("purged %d", res.Purged)
	}
	// The copy shares the identity (it is a copy): it lacks the purge.
	if lacks, _, _ := r.Behind(ctx); lacks != 1 {
		t.Fatalf("a copy lacks %d purges, want 1", lacks)
	}
	fresh, err := store.Open(e.dir+"/fresh", store.Options{Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	fr, err := NewRunner(RunnerOptions{Store: fresh, Config: e.cfg, Logger: e.logger, Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	e.at(31*day + time.Second)
	if _, err := fr.Run(ctx, RunRequest{Trigger: TriggerCLI}); err != nil {
		t.Fatal(err)
	}
	e.at(31*day + 2*time.Second)
	e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	// The first database is not behind the fresh one's run.
	if lacks, whole, err := e.runner().Behind(ctx); lacks != 0 || !whole || err != nil {
		t.Fatalf("behind %d %v %v", lacks, whole, err)
	}
}

// A run that could not record its file as the head, followed by another
// run, leaves no gap: the next run settles past it before it begins.
func TestNextRunSettlesPastAKilledRun(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.thread("a", 1, 1)
	first, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	e.deleteThread("a")
	e.at(31 * day)
	killed, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	if killed.Purged != 1 {
		t.Fatalf("purged %d", killed.Purged)
	}
	// As if it had died after sealing, before recording its head.
	back := audit.HeadOf(e.cfg.AuditPath, first.AuditFile, first.RunID, footerHash(t, first.AuditFile))
	if err := e.st.SetAuditHead(ctx, store.AuditHead(back)); err != nil {
		t.Fatal(err)
	}
	e.at(31*day + time.Second)
	next, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	if h, _, _ := e.st.AuditHead(ctx); h.RunID != next.RunID {
		t.Fatalf("head %q, want %q: the killed run's purges are in the database", h.RunID, next.RunID)
	}
}

// TestFirstRunOfAnOldDatabaseNamesItsIdentity: a database from before
// identities and heads gets both with its first purging run; the header of
// that run must name the identity the database keeps, or later replays take
// the run for another database's and pass over its purges.
func TestFirstRunOfAnOldDatabaseNamesItsIdentity(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, k := range []string{"sys:audit:head", "sys:db:id"} {
		if err := e.st.DB().Delete([]byte(k), nil); err != nil {
			t.Fatal(err)
		}
	}
	e.thread("gone", 1, 1)
	e.deleteThread("gone")
	e.at(31 * day)
	res, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	if res.Purged == 0 {
		t.Fatalf("the run purged nothing: %+v", res)
	}
	id, err := e.st.DatabaseID(ctx, false)
	if err != nil || id == "" {
		t.Fatalf("database id %q after the first run: %v", id, err)
	}
	r, err := audit.Open(res.AuditFile)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec, err := r.Next()
	if err != nil || rec.Header == nil {
		t.Fatalf("header of %s: %v", res.AuditFile, err)
	}
	if rec.Header.DatabaseID != id {
		t.Errorf("header names database %q, the database keeps %q", rec.Header.DatabaseID, id)
	}
}
