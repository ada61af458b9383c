package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// content creates a thread whose title and messages carry unique text, and
// returns the text of each message by ID.
func (e *env) content(tid string, msgs int) map[string]string {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.st.CreateThread(ctx, store.Thread{ID: tid, Title: "title-of-" + tid, Author: "a"}); err != nil {
		e.t.Fatal(err)
	}
	out := make(map[string]string)
	for i := range msgs {
		mid := fmt.Sprintf("%s-m%d", tid, i)
		text := "content-of-" + mid
		body, _ := json.Marshal(text)
		if _, err := e.st.AppendMessage(ctx, tid, store.Message{ID: mid, Author: "a", Body: body}); err != nil {
			e.t.Fatal(err)
		}
		out[mid] = text
	}
	return out
}

// copyDB takes a consistent copy of the env's database (a checkpoint moved
// out of the database folder), as a backup restored would be.
func (e *env) copyDB(name string) string {
	e.t.Helper()
	dir, err := e.st.Checkpoint(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	dst := filepath.Join(e.dir, name)
	if err := os.Rename(dir, dst); err != nil {
		e.t.Fatal(err)
	}
	return dst
}

// restored opens a copy made by copyDB with a runner over the same trail.
func (e *env) restored(dir string) (*store.Store, *Runner) {
	e.t.Helper()
	st, err := store.Open(dir, store.Options{Now: e.clock.Now})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = st.Close() })
	r, err := NewRunner(RunnerOptions{Store: st, Config: e.cfg, Logger: e.logger, Clock: e.clock, Host: "test-host",
		PID: 4243, Version: "test"})
	if err != nil {
		e.t.Fatal(err)
	}
	return st, r
}

// A restored copy taken before purges of every cause gets each purge
// replayed: purged with replayed true, in a run whose header says
// trigger restore and the backup; its files hold none of that content.
func TestReplayEveryCause(t *testing.T) {
	e := newEnv(t)
	e.cfg.MaxAge = 80 * day
	e.cfg.MaxMessages = 2
	e.cfg.Erase = true
	ctx := context.Background()

	first, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI}) // the backup's head
	aged := e.content("aged", 1)                                   // created at day 0: past max_age at day 101
	e.at(40 * day)
	gone := e.content("gone", 2)     // thread deleted: cause deleted
	mixed := e.content("mixed", 2)   // one message deleted: cause deleted
	capped := e.content("capped", 4) // two messages beyond max_messages
	backupDir := e.copyDB("backup")
	// After the backup: deletions, then a run purging every cause.
	e.at(41 * day)
	e.deleteThread("gone")
	e.deleteMessage("mixed", "mixed-m0")
	e.at(101 * day) // gone and mixed-m0 60 days deleted, aged 101 days old, the rest 61
	res, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	if res.Purged == 0 {
		t.Fatalf("nothing purged: %+v", res)
	}
	purgedNow := readAudit(t, res.AuditFile)

	st, r := e.restored(backupDir)
	if h, ok, _ := st.AuditHead(ctx); !ok || h.RunID != first.RunID {
		t.Fatalf("restored head %+v, want run %s", h, first.RunID)
	}
	rep, err := r.Run(ctx, RunRequest{Trigger: audit.TriggerRestore, Replay: ReplayOptions{BackupID: "b1"}})
	if err != nil || rep.Status != audit.RunCompleted {
		t.Fatalf("replay: %v %+v", err, rep)
	}
	ra := e.audit(rep)
	if ra.Header.Trigger != audit.TriggerRestore || ra.Header.BackupID != "b1" || ra.Header.AcceptBrokenAudit {
		t.Fatalf("header %+v", ra.Header)
	}
	causes := map[string]bool{}
	for _, want := range purgedNow.Items {
		if want.Status != audit.StatusPurged {
			continue
		}
		got := ra.item(t, want.ItemID)
		if got.Status != audit.StatusPurged || !got.Replayed || got.Cause != want.Cause {
			t.Errorf("%s: replayed as %+v, first purged as %+v", want.ItemID, got, want)
		}
		causes[want.Cause] = true
		if ok, _ := st.ItemExists(ctx, store.ItemKind(want.ItemType), want.ItemID); ok {
			t.Errorf("%s %s still in the restored database", want.ItemType, want.ItemID)
		}
	}
	for _, c := range []string{audit.CauseDeleted, audit.CauseMaxAge, audit.CauseMaxMessages} {
		if !causes[c] {
			t.Errorf("no purge of cause %s to replay", c)
		}
	}
	if !ra.Footer.Erased {
		t.Error("the replay did not erase")
	}
	if h, _, _ := st.AuditHead(ctx); h.RunID != rep.RunID {
		t.Errorf("head %q after the replay, want %q", h.RunID, rep.RunID)
	}
	// No file of the restored database holds purged content; live content stays.
	purgedText := []string{"title-of-gone", gone["gone-m0"], gone["gone-m1"], mixed["mixed-m0"],
		capped["capped-m0"], capped["capped-m1"], aged["aged-m0"]}
	st.Close()
	storetest.RequireNone(t, backupDir, purgedText...)
	storetest.RequireAll(t, backupDir, mixed["mixed-m1"], capped["capped-m3"], "title-of-capped")
}

// An item the backup never held is recorded skipped, reason absent.
func TestReplayAbsent(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	backupDir := e.copyDB("backup")
	e.content("later", 1)
	e.deleteThread("later")
	e.at(31 * day)
	res, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	if res.Purged != 1 {
		t.Fatalf("purged %d, want 1", res.Purged)
	}
	_, r := e.restored(backupDir)
	rep, err := r.Run(ctx, RunRequest{Trigger: audit.TriggerRestore})
	if err != nil {
		t.Fatal(err)
	}
	it := e.audit(rep).item(t, "later")
	if it.Status != audit.StatusSkipped || it.Reason != audit.ReasonAbsent || it.Replayed {
		t.Fatalf("item %+v, want skipped absent", it)
	}
}

// A trail that does not verify after the head replays nothing and fails,
// unless the broken trail is accepted, which the header records.
func TestReplayBrokenTrail(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.content("a", 1)
	e.content("b", 1)
	e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	backupDir := e.copyDB("backup")
	e.deleteThread("a")
	e.at(31 * day)
	lost, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	e.deleteThread("b")
	e.at(62 * day)
	e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	if err := os.Remove(lost.AuditFile); err != nil { // a file after the head goes missing
		t.Fatal(err)
	}
	st, r := e.restored(backupDir)
	rep, err := r.Run(ctx, RunRequest{Trigger: audit.TriggerRestore})
	if !errors.Is(err, ErrBrokenTrail) || rep.Status != audit.RunFailed || rep.Purged != 0 {
		t.Fatalf("replay over a broken trail: %v %+v", err, rep)
	}
	for _, tid := range []string{"a", "b"} {
		if ok, _ := st.ItemExists(ctx, store.KindThread, tid); !ok {
			t.Fatalf("thread %s purged by a replay that failed", tid)
		}
	}
	e.at(62*day + 1e9)
	rep, err = r.Run(ctx, RunRequest{Trigger: audit.TriggerRestore, Replay: ReplayOptions{AcceptBrokenAudit: true}})
	if err != nil || rep.Status != audit.RunCompleted {
		t.Fatalf("replay accepting the broken trail: %v %+v", err, rep)
	}
	ra := e.audit(rep)
	if !ra.Header.AcceptBrokenAudit || ra.item(t, "b").Status != audit.StatusPurged {
		t.Fatalf("header %+v items %+v", ra.Header, ra.Items)
	}
}

// A database copied back by hand is behind its trail: CatchUp replays
// (trigger start); a database that is not behind runs nothing.
func TestCatchUp(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.content("x", 1)
	e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	backupDir := e.copyDB("backup")
	e.deleteThread("x")
	e.at(31 * day)
	e.run(e.runner(), RunRequest{Trigger: TriggerCLI})

	svc, err := NewService(ServiceOptions{Runner: e.runner()})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if res, err := svc.CatchUp(ctx, false); err != nil || res != nil {
		t.Fatalf("catch-up of a database that is not behind: %v %+v", err, res)
	}
	st, r := e.restored(backupDir)
	rsvc, err := NewService(ServiceOptions{Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	defer rsvc.Close()
	e.at(31*day + 1e9)
	res, err := rsvc.CatchUp(ctx, false)
	if err != nil || res == nil || res.Purged != 1 {
		t.Fatalf("catch-up: %v %+v", err, res)
	}
	if e.audit(*res).Header.Trigger != audit.TriggerStart {
		t.Fatal("catch-up header trigger is not start")
	}
	if ok, _ := st.ItemExists(ctx, store.KindThread, "x"); ok {
		t.Fatal("thread x still there after the catch-up")
	}
	if res, err := rsvc.CatchUp(ctx, false); err != nil || res != nil {
		t.Fatalf("second catch-up: %v %+v", err, res)
	}
}

// Holds come from the backup: a thread on hold in it keeps its hold and
// its messages, while a purge the trail records (made after a hold was
// lifted) is replayed all the same.
func TestReplayKeepsHolds(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.content("held", 1)
	e.content("lifted", 1)
	if _, err := e.st.SetLegalHold(ctx, "held", true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.SetLegalHold(ctx, "lifted", true); err != nil {
		t.Fatal(err)
	}
	e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	backupDir := e.copyDB("backup")
	// After the backup: the hold of "lifted" is lifted and it is purged.
	if _, err := e.st.SetLegalHold(ctx, "lifted", false); err != nil {
		t.Fatal(err)
	}
	e.deleteThread("lifted")
	e.deleteThread("held")
	e.at(31 * day)
	res, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	if res.Purged != 1 {
		t.Fatalf("purged %d, want 1 (the held thread stays)", res.Purged)
	}
	st, r := e.restored(backupDir)
	rep, err := r.Run(ctx, RunRequest{Trigger: audit.TriggerRestore})
	if err != nil || rep.Purged != 1 {
		t.Fatalf("replay: %v %+v", err, rep)
	}
	if ok, _ := st.ItemExists(ctx, store.KindThread, "lifted"); ok {
		t.Fatal("the thread purged after its hold was lifted is back")
	}
	th, err := st.GetThread(ctx, "held")
	if err != nil || !th.LegalHold || th.Deleted {
		t.Fatalf("held thread %+v %v: want it as the backup had it, on hold, not deleted", th, err)
	}
}

// A catch-up that finds the lease held (a run of another database sharing
// the trail) waits for it rather than serving what the database lacks.
func TestCatchUpWaitsForTheLease(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.content("x", 1)
	e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	backupDir := e.copyDB("backup")
	e.deleteThread("x")
	e.at(31 * day)
	e.run(e.runner(), RunRequest{Trigger: TriggerCLI})

	other := e.runner()
	_, release, err := other.Hold(ctx) // holds the lease, as a run elsewhere would
	if err != nil {
		t.Fatal(err)
	}
	st, r := e.restored(backupDir)
	svc, err := NewService(ServiceOptions{Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	done := make(chan error, 1)
	go func() {
		_, err := svc.CatchUp(ctx, true)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("catch-up ended while the lease was held: %v", err)
	default:
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ok, _ := st.ItemExists(ctx, store.KindThread, "x"); ok {
		t.Fatal("thread x still there after the catch-up")
	}
}
