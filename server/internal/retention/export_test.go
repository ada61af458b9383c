package retention

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// contentOf is what an export record of an item must hold, read from the
// store before the purge: the thread's metadata and every stored version.
type contentSink struct {
	thread   json.RawMessage
	messages []audit.ExportMessage
}

func (c *contentSink) Thread(raw []byte) error {
	if raw != nil {
		c.thread = append(json.RawMessage(nil), raw...)
	} else {
		c.thread = json.RawMessage("null")
	}
	return nil
}

func (c *contentSink) Message(mid string) error {
	c.messages = append(c.messages, audit.ExportMessage{ID: mid, Versions: []json.RawMessage{}})
	return nil
}

func (c *contentSink) Version(raw []byte) error {
	m := &c.messages[len(c.messages)-1]
	m.Versions = append(m.Versions, append(json.RawMessage(nil), raw...))
	return nil
}

func (e *env) contentOf(kind store.ItemKind, tid, id string) contentSink {
	e.t.Helper()
	var c contentSink
	var err error
	if kind == store.KindThread {
		err = e.st.ReadThreadContent(context.Background(), id, &c)
	} else {
		err = e.st.ReadMessageContent(context.Background(), tid, id, &c)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	if c.messages == nil {
		c.messages = []audit.ExportMessage{}
	}
	return c
}

// exportRecords reads every record of an export file.
func exportRecords(t *testing.T, path string) []audit.ExportRecord {
	t.Helper()
	r, err := audit.OpenExport(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []audit.ExportRecord
	for {
		rec, err := r.ReadRecord()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
}

func sameContent(t *testing.T, rec audit.ExportRecord, want contentSink) {
	t.Helper()
	got, _ := json.Marshal(struct {
		T json.RawMessage
		M []audit.ExportMessage
	}{rec.Thread, rec.Messages})
	exp, _ := json.Marshal(struct {
		T json.RawMessage
		M []audit.ExportMessage
	}{want.thread, want.messages})
	if string(got) != string(exp) {
		t.Fatalf("record of %s holds\n%s\nwant\n%s", rec.ItemID, got, exp)
	}
}

func (e *env) exportOn() string {
	e.cfg.ExportPath = filepath.Join(e.dir, "exports")
	return e.cfg.ExportPath
}

func TestExportBeforePurge(t *testing.T) {
	e := newEnv(t)
	root := e.exportOn()
	e.thread("t1", 3, 2)
	e.deleteThread("t1")
	live := e.thread("live", 3, 2)
	e.deleteMessage("live", live[1])
	e.thread("recent", 1, 1)
	wantThread := e.contentOf(store.KindThread, "t1", "t1")
	wantMessage := e.contentOf(store.KindMessage, "live", live[1])
	if len(wantThread.messages) != 3 || len(wantThread.messages[0].Versions) != 2 || len(wantMessage.messages[0].Versions) != 3 {
		t.Fatalf("set-up: %+v / %+v", wantThread, wantMessage)
	}

	// A dry run exports nothing.
	e.at(31 * day)
	r := e.runner()
	e.run(r, RunRequest{DryRun: true})
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a dry run made the export folder: %v", err)
	}

	res, ra := e.run(r, RunRequest{})
	if res.Status != audit.RunCompleted || res.Purged != 2 || res.Exported != 2 || res.ExportFile == "" {
		t.Fatalf("run: %+v", res)
	}
	f := ra.Footer
	if f.Exported == nil || *f.Exported != 2 || len(f.ExportSHA256) != 64 ||
		f.ExportFile != audit.ExportFileName(root, res.StartedAt.Time, res.RunID) {
		t.Fatalf("footer export fields: exported %v, file %q, sha %q", f.Exported, f.ExportFile, f.ExportSHA256)
	}
	if strings.TrimSuffix(filepath.Base(f.ExportFile), ".jsonl.gz") != "export"+strings.TrimPrefix(strings.TrimSuffix(filepath.Base(res.AuditFile), ".jsonl"), "retention") {
		t.Errorf("export %s is not named like its audit file %s", f.ExportFile, res.AuditFile)
	}
	recs := exportRecords(t, f.ExportFile)
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	for _, rec := range recs {
		if rec.Recovered || rec.Cause != "deleted" || rec.ExportedAt.IsZero() {
			t.Errorf("record head %+v", rec.ExportHead)
		}
		switch rec.ItemID {
		case "t1":
			if rec.ItemType != audit.ItemThread || rec.ThreadID != "t1" {
				t.Errorf("head %+v", rec.ExportHead)
			}
			sameContent(t, rec, wantThread)
		case live[1]:
			if rec.ItemType != audit.ItemMessage || rec.ThreadID != "live" {
				t.Errorf("head %+v", rec.ExportHead)
			}
			sameContent(t, rec, wantMessage)
		default:
			t.Errorf("record of %s", rec.ItemID)
		}
	}
	if e.exists(store.KindThread, "t1") || e.exists(store.KindMessage, live[1]) {
		t.Fatal("exported items not purged")
	}
	if got := counterValue(t, e.metrics.ExportedItems); got != 2 {
		t.Errorf("exported_items_total = %v", got)
	}

	// A run that purges nothing leaves no export file and says so.
	res, ra = e.run(r, RunRequest{})
	if ra.Footer.Exported == nil || *ra.Footer.Exported != 0 || ra.Footer.ExportFile != "" {
		t.Fatalf("empty run footer: %+v", ra.Footer)
	}
	files, _ := filepath.Glob(filepath.Join(root, "*", "*"))
	if len(files) != 1 {
		t.Fatalf("export files %v, want only the first run's", files)
	}
}

// An export that cannot be written deletes nothing, fails the run and
// counts the error; the next run with a writable folder exports the item
// again, recovered, and purges it.
func TestExportFailureDeletesNothing(t *testing.T) {
	e := newEnv(t)
	// A file where the run's month folder must go.
	root := e.exportOn()
	blocker := filepath.Join(root, t0.Add(31*day).Format("2006-01"))
	if err := os.MkdirAll(root, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mids := e.thread("t1", 2, 2)
	e.deleteThread("t1")
	before := e.threadKeys("t1", mids)
	e.at(31 * day)

	res, err := e.runner().Run(context.Background(), RunRequest{})
	if err == nil || res.Status != audit.RunFailed || !strings.Contains(res.Error, "export") {
		t.Fatalf("run: %+v, %v", res, err)
	}
	ra := e.audit(res)
	it := ra.item(t, "t1")
	if it.Status != audit.StatusFailed || !strings.HasPrefix(it.Reason, reasonExportFailed) || ra.Footer.Purged != 0 {
		t.Fatalf("item %+v, footer %+v", it, ra.Footer)
	}
	if after := e.threadKeys("t1", mids); !maps.Equal(before, after) {
		t.Fatal("keys of an item whose export failed were deleted")
	}
	if got := counterValue(t, e.metrics.Errors.WithLabelValues(stageExport)); got != 1 {
		t.Errorf("errors_total{stage=export} = %v", got)
	}

	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	res, ra = e.run(e.runner(), RunRequest{})
	it = ra.item(t, "t1")
	if res.Status != audit.RunCompleted || it.Status != audit.StatusPurged || !it.Recovered || e.exists(store.KindThread, "t1") {
		t.Fatalf("second run %+v, item %+v", res, it)
	}
	recs := exportRecords(t, ra.Footer.ExportFile)
	if len(recs) != 1 || !recs[0].Recovered || len(recs[0].Messages) != 2 {
		t.Fatalf("records %+v", recs)
	}
}

// A run killed after an item's export record was durable and before its
// delete leaves an .inprogress export and a purge marker: the next run
// seals the export and exports the item again, recovered.
func TestExportAfterCrashIsRecovered(t *testing.T) {
	e := newEnv(t)
	root := e.exportOn()
	e.thread("t1", 2, 1)
	e.deleteThread("t1")
	e.at(31 * day)
	want := e.contentOf(store.KindThread, "t1", "t1")

	// The crashed run: marker, durable record, file still .inprogress.
	e.beginPurge("t1", "crashed")
	ew, err := audit.NewExportWriter(root, "crashed", t0.Add(31*day))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ew.Begin(audit.ExportHead{ItemType: audit.ItemThread, ItemID: "t1", ThreadID: "t1", Cause: "deleted", ExportedAt: t0})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.ReadThreadContent(context.Background(), "t1", rec); err != nil {
		t.Fatal(err)
	}
	if err := rec.Commit(); err != nil {
		t.Fatal(err)
	}
	sum, err := ew.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(sum.Path, sum.Path+".inprogress"); err != nil {
		t.Fatal(err)
	}

	e.at(32 * day)
	res, ra := e.run(e.runner(), RunRequest{})
	it := ra.item(t, "t1")
	if res.Status != audit.RunCompleted || it.Status != audit.StatusPurged || !it.Recovered {
		t.Fatalf("run %+v, item %+v", res, it)
	}
	first := exportRecords(t, sum.Path) // sealed by the run
	second := exportRecords(t, ra.Footer.ExportFile)
	if len(first) != 1 || first[0].Recovered || len(second) != 1 || !second[0].Recovered {
		t.Fatalf("first %+v\nsecond %+v", first, second)
	}
	sameContent(t, first[0], want)
	sameContent(t, second[0], want)
	if !strings.Contains(e.logs.String(), "retention_export_sealed") {
		t.Error("sealing not logged")
	}
}
