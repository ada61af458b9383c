package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// oldMessages creates thread tid with n messages, one a day from day fromDay,
// each edited to versions versions (several delete batches each).
func (e *env) oldMessages(tid string, fromDay, n, versions int) []string {
	e.t.Helper()
	e.thread(tid, 0, 1)
	ids := e.msgsAt(tid, time.Duration(fromDay)*day, n)
	for _, id := range ids {
		for v := 1; v < versions; v++ {
			if _, err := e.st.EditMessage(context.Background(), tid, id, json.RawMessage(fmt.Sprintf(`"v%d"`, v))); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	return ids
}

// A legal hold set while a thread's messages are claimed and in the export
// group, past their re-check, is refused (409) and the purge goes on; a
// hold answered 200 would have to leave every message of the thread.
func TestHoldDuringAnExportGroupIsRefusedOrHonoured(t *testing.T) {
	e := newEnv(t)
	e.exportOn()
	e.cfg.MaxAge = 10 * day
	e.cfg.BatchSize = 2
	e.oldMessages("a", 0, 2, 3)
	held := e.oldMessages("held", 2, 5, 3)
	e.at(20 * day)
	r := e.runner()
	var holdErr error
	asked := false
	r.hooks.beforeBatch = func(ctx context.Context, b batchPoint) {
		if !asked {
			asked = true
			_, holdErr = e.st.SetLegalHold(ctx, "held", true)
		}
	}
	e.run(r, RunRequest{})
	if !asked {
		t.Fatal("no batch ran")
	}
	switch {
	case holdErr == nil:
		for _, id := range held {
			if !e.exists(store.KindMessage, id) {
				t.Errorf("hold answered 200, yet message %s of the held thread was purged", id)
			}
		}
	case errors.Is(holdErr, store.ErrPurgeInProgress):
		if !strings.Contains(holdErr.Error(), "held-d") {
			t.Errorf("409 names no message being purged: %v", holdErr)
		}
	default:
		t.Fatalf("hold: %v", holdErr)
	}
	if holdErr == nil {
		t.Fatal("the hold was answered 200 while the held thread's messages were past their re-check")
	}
	if _, err := e.st.SetLegalHold(context.Background(), "held", true); err != nil {
		t.Fatalf("hold after the run: %v", err)
	}
}

// A legal hold that lands while claims wait in the export queue wins: the
// claims are given back (recorded skipped, reason legal hold, markers
// cleared), nothing of the thread is exported or deleted.
func TestHoldGivesQueuedClaimsBack(t *testing.T) {
	e := newEnv(t)
	e.exportOn()
	e.cfg.MaxAge = 10 * day
	held := e.oldMessages("held", 0, 4, 2)
	other := e.oldMessages("other", 4, 2, 1)
	e.at(20 * day)
	r := e.runner()
	r.hooks.beforeConfirm = func(ctx context.Context, m store.PurgeMarker) {
		if m.ThreadID == "held" {
			if _, err := e.st.SetLegalHold(ctx, "held", true); err != nil {
				t.Errorf("hold while the claims wait: %v", err)
			}
		}
	}
	res, ra := e.run(r, RunRequest{})
	if res.Status != audit.RunCompleted || res.Purged != 2 || res.Exported != 2 {
		t.Fatalf("run %+v", res)
	}
	for _, id := range held {
		if !e.exists(store.KindMessage, id) {
			t.Errorf("held message %s was deleted", id)
		}
		if it := ra.item(t, id); it.Status != audit.StatusSkipped || it.Reason != reasonLegalHold {
			t.Errorf("record of %s: %+v", id, it)
		}
	}
	for _, id := range other {
		if e.exists(store.KindMessage, id) || ra.item(t, id).Status != audit.StatusPurged {
			t.Errorf("message %s of the other thread was not purged", id)
		}
	}
	for _, rec := range exportRecords(t, res.ExportFile) {
		if rec.ThreadID == "held" {
			t.Errorf("held message %s was exported", rec.ItemID)
		}
	}
	if ms, err := e.st.PendingPurges(context.Background()); err != nil || len(ms) != 0 {
		t.Fatalf("markers left: %+v %v", ms, err)
	}
	checkIndexes(t, e)
}

// A hold asked for after a run was stopped part way through a message's
// purge answers 409 (the message can no longer be given back whole), and
// the next run finishes the purge; a hold before a claim's re-check wins.
func TestHoldAfterAnInterruptedMessagePurge(t *testing.T) {
	e := newEnv(t)
	e.cfg.MaxAge = 10 * day
	e.cfg.BatchSize = 2
	ids := e.oldMessages("t", 0, 2, 10)
	e.at(20 * day)
	r := e.runner()
	ctx := context.Background()
	r.hooks.beforeBatch = func(_ context.Context, b batchPoint) {
		if b.N == 2 {
			if _, err := r.SetPause(ctx, true, "test"); err != nil {
				t.Error(err)
			}
		}
	}
	res, _ := e.run(r, RunRequest{})
	if res.Status != audit.RunInterrupted {
		t.Fatalf("run %+v", res)
	}
	if !e.exists(store.KindMessage, ids[0]) {
		t.Fatal("set-up: the first message's purge was not left part way")
	}
	_, err := e.st.SetLegalHold(ctx, "t", true)
	if !errors.Is(err, store.ErrPurgeInProgress) {
		t.Fatalf("hold after an interrupted purge: %v, want %v", err, store.ErrPurgeInProgress)
	}
	r.hooks.beforeBatch = nil
	if _, err := r.SetPause(ctx, false, ""); err != nil {
		t.Fatal(err)
	}
	_, ra := e.run(r, RunRequest{})
	if it := ra.item(t, ids[0]); it.Status != audit.StatusPurged || !it.Recovered || e.exists(store.KindMessage, ids[0]) {
		t.Fatalf("interrupted purge not finished: %+v", it)
	}
	if _, err := e.st.SetLegalHold(ctx, "t", true); err != nil {
		t.Fatalf("hold once the purge is finished: %v", err)
	}
}

// An override acknowledged while a run works through earlier deletions
// governs a thread the run has not reached yet.
func TestOverrideDuringARunGovernsLaterClaims(t *testing.T) {
	e := newEnv(t)
	e.cfg.BatchSize = 2
	e.thread("early", 4, 2)
	e.deleteThread("early")
	e.at(1 * day)
	e.thread("late", 1, 1)
	e.deleteThread("late")
	e.at(40 * day)
	r := e.runner()
	ctx := context.Background()
	asked := false
	r.hooks.beforeBatch = func(_ context.Context, b batchPoint) {
		if !asked {
			asked = true
			if _, err := r.SetThreadPolicy(ctx, "late", PolicyOverride{Period: ptr("400d")}); err != nil {
				t.Errorf("override during the run: %v", err)
			}
		}
	}
	res, ra := e.run(r, RunRequest{})
	if res.Purged != 1 || e.exists(store.KindThread, "early") {
		t.Fatalf("run %+v", res)
	}
	if !e.exists(store.KindThread, "late") {
		t.Fatal("the run purged a thread under the period its acknowledged override replaced")
	}
	if it := ra.item(t, "late"); it.Status != audit.StatusSkipped || !strings.HasPrefix(it.Reason, reasonOverride) {
		t.Fatalf("record of late: %+v", it)
	}
	if ms, _ := e.st.PendingPurges(ctx); len(ms) != 0 {
		t.Fatalf("markers left: %+v", ms)
	}
}

// The export folder is checked where each run opens it: replaced by a
// symbolic link after start, it fails the run closed, and nothing is
// written where the link points.
func TestExportFolderReplacedByALinkFailsClosed(t *testing.T) {
	e := newEnv(t)
	root := e.exportOn()
	e.thread("t1", 1, 1)
	e.deleteThread("t1")
	e.at(31 * day)
	r := e.runner()
	target := filepath.Join(e.dir, "db", "planted")
	if err := os.MkdirAll(target, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, root); err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(context.Background(), RunRequest{})
	if err == nil || res.Status != audit.RunFailed || res.Purged != 0 {
		t.Fatalf("run %+v, %v", res, err)
	}
	ra := e.audit(res)
	if !strings.Contains(ra.Footer.Reason, "symbolic link") {
		t.Errorf("footer reason %q does not say why", ra.Footer.Reason)
	}
	if !e.exists(store.KindThread, "t1") {
		t.Error("t1 was deleted")
	}
	if left, _ := os.ReadDir(target); len(left) != 0 {
		t.Errorf("the run wrote through the link: %v", left)
	}
}

// When a group's export fails, every claimed item of the group is recorded
// failed, and none is deleted.
func TestFailedExportRecordsEveryItemOfTheGroup(t *testing.T) {
	e := newEnv(t)
	root := e.exportOn()
	for i := range 3 {
		e.thread(fmt.Sprintf("t%d", i), 1, 1)
		e.deleteThread(fmt.Sprintf("t%d", i))
	}
	e.at(31 * day)
	// The run's month folder cannot be made: a file stands in its place.
	if err := os.MkdirAll(root, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, t0.Add(31*day).Format("2006-01")), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	res, err := e.runner().Run(context.Background(), RunRequest{})
	if err == nil || res.Status != audit.RunFailed || res.Purged != 0 || res.Failed != 3 {
		t.Fatalf("run %+v, %v", res, err)
	}
	ra := e.audit(res)
	for i := range 3 {
		id := fmt.Sprintf("t%d", i)
		if it := ra.item(t, id); it.Status != audit.StatusFailed || !strings.HasPrefix(it.Reason, reasonExportFailed) {
			t.Errorf("record of %s: %+v", id, it)
		}
		if !e.exists(store.KindThread, id) {
			t.Errorf("%s was deleted", id)
		}
	}
}
