package retention

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A run counts what is due at its start, so its progress says done/due,
// the rate and the time left without MAX_ITEMS; the caller's Progress
// sees the same figures.
func TestRunReportsProgressAgainstWhatIsDue(t *testing.T) {
	e := newEnv(t)
	const threads, messages = 25, 6
	for i := range threads {
		tid := fmt.Sprintf("t%02d", i)
		e.thread(tid, 1, 1)
		e.deleteThread(tid)
	}
	mids := e.thread("live", messages, 1)
	for _, mid := range mids {
		e.deleteMessage("live", mid)
	}
	e.thread("not-due", 1, 1)
	e.at(20 * day)
	e.deleteThread("not-due") // deleted 20 days after the rest: not due at 40 days
	e.at(40 * day)

	var reports []Progress
	res, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI, Progress: func(p Progress) {
		reports = append(reports, p)
		e.clock.Advance(time.Second) // every entry then takes a second
	}})
	due := int64(threads + messages)
	if res.Purged != due {
		t.Fatalf("purged %d, want %d", res.Purged, due)
	}
	if len(reports) < 2 || reports[0].Due != due || reports[0].Done != 0 {
		t.Fatalf("first report %+v of %d, want due %d, done 0", reports[0], len(reports), due)
	}
	last := reports[len(reports)-1]
	if last.Done != due || last.Purged != due || last.Left != 0 {
		t.Fatalf("last report %+v", last)
	}
	mid := reports[len(reports)/2]
	// A second an entry: the rate is about one a second, the time left
	// about one second an entry left.
	if mid.Done <= 0 || mid.Done >= due || mid.Rate <= 0.5 || mid.Rate > 1.5 ||
		mid.Left < time.Duration(due-mid.Done)*time.Second*2/3 || mid.Left > time.Duration(due-mid.Done)*time.Second*3/2 {
		t.Fatalf("middle report %+v", mid)
	}
	for i := 1; i < len(reports); i++ {
		if reports[i].Done < reports[i-1].Done || reports[i].Due != due {
			t.Fatalf("reports %d and %d: %+v then %+v", i-1, i, reports[i-1], reports[i])
		}
	}

	logs := e.logs.String()
	if !strings.Contains(logs, fmt.Sprintf(`"msg":"retention_run_due","run_id":"%s","due":%d`, res.RunID, due)) {
		t.Fatalf("no retention_run_due line:\n%s", logs)
	}
	// Ten seconds apart: lines carry done/due and the time left.
	if !strings.Contains(logs, fmt.Sprintf(`"msg":"retention_run_progress","run_id":"%s","done":`, res.RunID)) ||
		!strings.Contains(logs, fmt.Sprintf(`"due":%d`, due)) || !strings.Contains(logs, `"time_left_ms":`) {
		t.Fatalf("progress lines lack done, due or time left:\n%s", logs)
	}
}

// A run faster than the report interval still reports where it ended,
// not only where it began.
func TestRunReportsItsEnd(t *testing.T) {
	e := newEnv(t)
	for i := range 3 {
		tid := fmt.Sprintf("t%d", i)
		e.thread(tid, 1, 1)
		e.deleteThread(tid)
	}
	e.at(40 * day)
	var reports []Progress
	e.run(e.runner(), RunRequest{Trigger: TriggerCLI, Progress: func(p Progress) { reports = append(reports, p) }})
	if len(reports) != 2 || reports[0].Done != 0 || reports[0].Due != 3 || reports[1].Done != 3 || reports[1].Purged != 3 {
		t.Fatalf("reports %+v, want the start (0 of 3) and the end (3 of 3)", reports)
	}
}

// With policies in force, what is due counts every source (the age index,
// an overridden thread's own age limit, the messages beyond a cap), by
// cause; a held thread's excess is not due, as the run takes none of it.
func TestProgressCountsEveryCauseDue(t *testing.T) {
	e := newEnv(t)
	e.cfg.MaxAge = 90 * day
	e.cfg.MaxMessages = 3
	ctx := context.Background()
	for _, tid := range []string{"plain", "short", "big", "held", "gone"} {
		e.thread(tid, 0, 1)
	}
	e.deleteThread("gone")
	e.msgsAt("plain", 0, 2)      // 105 days old: max_age
	e.msgsAt("short", 95*day, 1) // 10 days old, over short's own 7d
	e.msgsAt("big", 100*day, 5)  // 2 beyond the cap
	e.msgsAt("held", 100*day, 5) // on hold: nothing due
	e.at(105 * day)
	r := e.runner()
	if _, err := r.SetThreadPolicy(ctx, "short", PolicyOverride{MaxAge: ptr("7d")}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.SetLegalHold(ctx, "held", true); err != nil {
		t.Fatal(err)
	}

	var reports []Progress
	res, _ := e.run(r, RunRequest{Trigger: TriggerCLI, Progress: func(p Progress) { reports = append(reports, p) }})
	want := map[string]int64{audit.CauseDeleted: 1, audit.CauseMaxAge: 3, audit.CauseMaxMessages: 2}
	if res.Purged != 6 || len(reports) < 2 {
		t.Fatalf("purged %d with %d reports, want 6", res.Purged, len(reports))
	}
	first, last := reports[0], reports[len(reports)-1]
	if first.Due != 6 || !maps.Equal(first.DueByCause, want) || first.Done != 0 {
		t.Fatalf("first report %+v, want due 6 as %v", first, want)
	}
	if last.Done != last.Due || !maps.Equal(last.DoneByCause, want) {
		t.Fatalf("last report %+v, want all of %v done", last, want)
	}
	if !strings.Contains(e.logs.String(), `"due_by_cause":{"deleted":1,"max_age":3,"max_messages":2}`) {
		t.Fatalf("no due_by_cause in the logs:\n%s", e.logs.String())
	}
}

// A held thread with its own age limit keeps its old messages for as long
// as the hold lasts; a run records the hold once and does not read them
// all again: nothing of it is due or looked at.
func TestHeldThreadsOwnAgeLimitIsNotReadEveryRun(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.thread("open", 0, 1)
	e.thread("held", 0, 1)
	open := e.msgsAt("open", 0, 2)
	held := e.msgsAt("held", 0, 20)
	e.at(30 * day)
	r := e.runner()
	for _, tid := range []string{"open", "held"} {
		if _, err := r.SetThreadPolicy(ctx, tid, PolicyOverride{MaxAge: ptr("7d")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.st.SetLegalHold(ctx, "held", true); err != nil {
		t.Fatal(err)
	}
	for run := range 2 {
		var last Progress
		res, ra := e.run(r, RunRequest{Trigger: TriggerCLI, Progress: func(p Progress) { last = p }})
		wantPurged, wantSeen := int64(len(open)), int64(len(open))
		if run == 1 {
			wantPurged, wantSeen = 0, 0
		}
		if res.Purged != wantPurged || last.Done != wantSeen || last.Due != wantSeen {
			t.Fatalf("run %d: purged %d, progress %+v; want %d purged, %d looked at and due", run, res.Purged, last, wantPurged, wantSeen)
		}
		if it := ra.item(t, "held"); it.Status != audit.StatusSkipped || it.Reason != reasonLegalHold || it.Cause != audit.CauseMaxAge {
			t.Fatalf("run %d: held thread record %+v", run, it)
		}
	}
	for _, mid := range held {
		if !e.exists(store.KindMessage, mid) {
			t.Fatalf("%s of the held thread was purged", mid)
		}
	}
}
