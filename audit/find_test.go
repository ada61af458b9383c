package audit

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Find returns an item's records from sealed and in-progress files in run
// order, with each run's header facts, and passes over other items'
// records and lines that do not parse.
func TestFindAnItemAcrossTheTrail(t *testing.T) {
	root := t.TempDir()
	first := writeRun(t, root, "run-1")

	later := fixedStart.Add(time.Hour)
	h := testHeader()
	h.StartedAt, h.DryRun = later, true
	w, err := newWriter(root, "run-2", h, stepClock(later, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Item(Item{ItemType: ItemThread, ItemID: "t-0005", ThreadID: "t-0005", Status: StatusDryRun, Cause: CauseDeleted}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil { // the run is still going: no footer
		t.Fatal(err)
	}
	// A torn line in another file of the month is passed over.
	if err := os.WriteFile(filepath.Join(filepath.Dir(first), "retention-20250301T010000Z-torn.jsonl"), []byte(`{"msg":"retention_audit_item","item_id":"t-0005"`), 0o640); err != nil {
		t.Fatal(err)
	}

	got, err := Find(root, "t-0005")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("Find = %+v, want 2 records", got)
	}
	if m := got[0]; m.File != first || m.Line != 6 || m.RunID != "run-1" || m.InProgress || m.DryRun ||
		!m.RunStarted.Equal(fixedStart) || m.Item.Status != StatusFailed || m.Item.Reason != "batch commit: disk full" {
		t.Errorf("first record %+v", m)
	}
	if m := got[1]; m.RunID != "run-2" || !m.InProgress || !m.DryRun || !m.RunStarted.Equal(later) || m.Item.Status != StatusDryRun {
		t.Errorf("second record %+v", m)
	}

	got, err = Find(root, "m-0002")
	if err != nil || len(got) != 1 || got[0].Item.PurgedAt == nil || !got[0].Item.Recovered || got[0].Item.Cause != CauseMaxAge {
		t.Fatalf("Find(m-0002) = %+v, %v", got, err)
	}
	// "t-000" is a prefix of recorded IDs, not an ID.
	if got, err := Find(root, "t-000"); err != nil || len(got) != 0 {
		t.Fatalf("Find(prefix) = %+v, %v", got, err)
	}
	if got, err := Find(filepath.Join(root, "missing"), "t-0005"); err != nil || len(got) != 0 {
		t.Fatalf("Find(missing root) = %+v, %v", got, err)
	}
}
