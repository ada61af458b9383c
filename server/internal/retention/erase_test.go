package retention

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// planted is content put where a purge must erase it, and where it must not.
type planted struct {
	purged, live []string
	liveThread   string
	liveMsg      string
}

// plant writes unique strings into a thread that will be purged (title,
// author, message bodies, an old version of an edited message), into a
// message deleted inside a live thread, and into live data. It spreads them
// over every place Pebble keeps data: bottom-level tables, upper-level
// tables, the memtable and its WAL, and logs kept for reuse.
func plant(t *testing.T, e *env) planted {
	t.Helper()
	ctx := context.Background()
	db := e.st.DB()
	p := planted{
		purged: []string{"PlantPurgedTitleQ7", "PlantPurgedAuthorQ7", "PlantPurgedBodyQ7",
			"PlantPurgedOldVersionQ7", "PlantPurgedNewVersionQ7", "PlantDeletedInLiveQ7"},
		live:       []string{"PlantLiveTitleQ7", "PlantLiveAuthorQ7", "PlantLiveBodyQ7"},
		liveThread: "live-1",
		liveMsg:    "live-1-m0",
	}
	body := func(s string) json.RawMessage { return json.RawMessage(`{"text":"` + s + `"}`) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := e.st.CreateThread(ctx, store.Thread{ID: "gone-1", Title: "PlantPurgedTitleQ7", Author: "PlantPurgedAuthorQ7"})
	must(err)
	_, err = e.st.AppendMessage(ctx, "gone-1", store.Message{ID: "gone-1-m0", Author: "PlantPurgedAuthorQ7", Body: body("PlantPurgedBodyQ7")})
	must(err)
	_, err = e.st.AppendMessage(ctx, "gone-1", store.Message{ID: "gone-1-m1", Author: "x", Body: body("PlantPurgedOldVersionQ7")})
	must(err)
	_, err = e.st.CreateThread(ctx, store.Thread{ID: p.liveThread, Title: "PlantLiveTitleQ7", Author: "PlantLiveAuthorQ7"})
	must(err)
	_, err = e.st.AppendMessage(ctx, p.liveThread, store.Message{ID: p.liveMsg, Author: "y", Body: body("PlantLiveBodyQ7")})
	must(err)
	_, err = e.st.AppendMessage(ctx, p.liveThread, store.Message{ID: "live-1-m1", Author: "y", Body: body("PlantDeletedInLiveQ7")})
	must(err)
	// Everything so far to the bottom level.
	must(db.Flush())
	must(db.Compact(ctx, []byte{0}, []byte{0xff}, false))

	// A newer version in an upper-level table, its old one at the bottom.
	_, err = e.st.EditMessage(ctx, "gone-1", "gone-1-m1", body("PlantPurgedNewVersionQ7"))
	must(err)
	must(db.Flush())
	// Logs holding the content are retired and kept for reuse.
	for range 3 {
		must(db.Flush())
	}
	// The soft deletes write fresh copies, left in the memtable and WAL.
	e.deleteThread("gone-1")
	e.deleteMessage(p.liveThread, "live-1-m1")
	return p
}

func TestEraseLeavesNoPurgedContentOnDisk(t *testing.T) {
	e := newEnv(t)
	dbDir := filepath.Join(e.dir, "db")
	e.cfg.AuditPath = filepath.Join(dbDir, "purge_audit") // the default: audit files are scanned too
	e.cfg.LeasePath = filepath.Join(e.cfg.AuditPath, "retention.lock")
	e.cfg.Erase = true
	e.cfg.EraseRate = 1024 // paced: compacted one bottom-level table at a time
	p := plant(t, e)

	// The scan must be able to see every string before it can prove any gone.
	storetest.RequireAll(t, dbDir, append(p.purged, p.live...)...)
	if t.Failed() {
		t.FailNow()
	}

	e.at(31 * day)
	res, ra := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	if res.Status != audit.RunCompleted || res.Purged != 2 {
		t.Fatalf("run: %+v", res)
	}
	if !ra.Footer.Erased || ra.Footer.EraseMS < 0 {
		t.Fatalf("footer does not claim the erase: %+v", ra.Footer)
	}

	storetest.RequireNone(t, dbDir, p.purged...)
	storetest.RequireAll(t, dbDir, p.live...)
	ctx := context.Background()
	th, err := e.st.GetThread(ctx, p.liveThread)
	if err != nil || th.Title != "PlantLiveTitleQ7" || th.Author != "PlantLiveAuthorQ7" {
		t.Fatalf("live thread after erase: %+v, %v", th, err)
	}
	m, err := e.st.GetMessage(ctx, p.liveThread, p.liveMsg)
	if err != nil || !strings.Contains(string(m.Body), "PlantLiveBodyQ7") {
		t.Fatalf("live message after erase: %+v, %v", m, err)
	}
	// A new database owes no full erase: only the purged ranges were compacted.
	if logs := e.logs.String(); strings.Contains(logs, "retention_erase_full") || !strings.Contains(logs, "retention_erased") {
		t.Fatalf("want a ranged erase, not a full one:\n%s", logs)
	}
	if got := counterValue(t, e.metrics.EraseDuration); got != 1 {
		t.Fatalf("erase duration observations = %v, want 1", got)
	}
}

// Without erasure the purged content stays readable (what the test above
// would see if the erase did nothing); the first run with erasure on then
// erases it in full, although it purges nothing itself.
func TestEraseOffKeepsContentUntilFirstErasingRun(t *testing.T) {
	e := newEnv(t)
	dbDir := filepath.Join(e.dir, "db")
	p := plant(t, e)

	e.at(31 * day)
	res, ra := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	if res.Purged != 2 || ra.Footer.Erased {
		t.Fatalf("run with erasure off: %+v, footer %+v", res, ra.Footer)
	}
	rep, err := storetest.Scan(dbDir, p.purged)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Found()) == 0 {
		t.Fatal("no purged string left after a run without erasure: the scan cannot tell")
	}

	e.cfg.Erase = true
	res, ra = e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	if res.Purged != 0 || !ra.Footer.Erased {
		t.Fatalf("first erasing run: %+v, footer %+v", res, ra.Footer)
	}
	if !strings.Contains(e.logs.String(), "retention_erase_full") {
		t.Fatalf("the one-time full erase is not logged:\n%s", e.logs.String())
	}
	storetest.RequireNone(t, dbDir, p.purged...)
	storetest.RequireAll(t, dbDir, p.live...)

	// Done once: the next run has nothing to erase.
	res, ra = e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	if ra.Footer.Erased || res.Status != audit.RunCompleted {
		t.Fatalf("run after the full erase: %+v, footer %+v", res, ra.Footer)
	}
}

// A dry run neither erases nor claims to.
func TestEraseSkippedOnDryRun(t *testing.T) {
	e := newEnv(t)
	e.cfg.Erase = true
	plant(t, e)
	e.at(31 * day)
	_, ra := e.run(e.runner(), RunRequest{Trigger: TriggerCLI, DryRun: true})
	if ra.Footer.Erased || ra.Footer.EraseMS != 0 {
		t.Fatalf("dry run footer: %+v", ra.Footer)
	}
}

// A reader pinning purged data past the wait fails the erase: the footer
// says failed and does not claim it, the error is counted, and the next
// run, with the reader gone, erases everything.
func TestEraseFailureFailsRun(t *testing.T) {
	e := newEnv(t)
	dbDir := filepath.Join(e.dir, "db2")
	st, err := store.Open(dbDir, store.Options{Now: e.clock.Now, EraseWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e.st = st
	e.cfg.Erase = true
	p := plant(t, e)

	snap := st.DB().NewSnapshot() // opened before the purge: it can still see the content
	e.at(31 * day)
	res, err := e.runner().Run(context.Background(), RunRequest{Trigger: TriggerCLI})
	if err == nil || res.Status != audit.RunFailed || !strings.HasPrefix(res.Error, "erase: ") {
		t.Fatalf("run with a pinning reader: %+v, %v", res, err)
	}
	ra := e.audit(res)
	if ra.Footer.Erased || ra.Footer.Status != audit.RunFailed || ra.Footer.Purged != 2 {
		t.Fatalf("footer: %+v", ra.Footer)
	}
	if got := counterValue(t, e.metrics.Errors.WithLabelValues(stageErase)); got != 1 {
		t.Fatalf("errors_total{stage=erase} = %v, want 1", got)
	}
	if err := snap.Close(); err != nil {
		t.Fatal(err)
	}

	res, ra = e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	if !ra.Footer.Erased || res.Status != audit.RunCompleted {
		t.Fatalf("next run: %+v, footer %+v", res, ra.Footer)
	}
	storetest.RequireNone(t, dbDir, p.purged...)
	storetest.RequireAll(t, dbDir, p.live...)
}

// The erase step reports where it is once the scans are over, step by
// step, so a progress bar does not sit at due/due through it.
func TestEraseStepReportsProgress(t *testing.T) {
	e := newEnv(t)
	e.cfg.Erase = true
	for i := range 3 {
		e.thread(fmt.Sprintf("t%d", i), 2, 2)
		e.deleteThread(fmt.Sprintf("t%d", i))
	}
	e.at(31 * day)
	var steps []string
	var last Progress
	res, ra := e.run(e.runner(), RunRequest{Trigger: TriggerCLI, Progress: func(p Progress) {
		last = p
		if p.Erase != nil && (len(steps) == 0 || steps[len(steps)-1] != p.Erase.Step) {
			steps = append(steps, p.Erase.Step)
		}
	}})
	if res.Purged != 3 || !ra.Footer.Erased {
		t.Fatalf("run %+v, footer %+v", res, ra.Footer)
	}
	want := []string{store.EraseWaitReaders, store.EraseCompact, store.EraseRotateLogs, store.EraseRemoveFiles}
	if !slices.Equal(steps, want) {
		t.Fatalf("erase steps reported %q, want %q", steps, want)
	}
	if last.Erase == nil || last.Done != 3 || last.Due != 3 {
		t.Fatalf("last report %+v", last)
	}
	if !strings.Contains(e.logs.String(), `"msg":"retention_erase_progress"`) {
		t.Error("the erase steps are not logged")
	}
}
