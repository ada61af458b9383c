package audit

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLastCompleted(t *testing.T) {
	root := t.TempDir()
	if sum, err := LastCompleted(root); sum != nil || err != nil {
		t.Fatalf("empty root: %v, %v", sum, err)
	}
	if sum, err := LastCompleted(filepath.Join(root, "missing")); sum != nil || err != nil {
		t.Fatalf("missing root: %v, %v", sum, err)
	}

	at := func(month time.Month, day int) time.Time { return time.Date(2025, month, day, 2, 0, 0, 0, time.UTC) }
	seal := func(id string, start time.Time, dry bool, status string) {
		t.Helper()
		h := testHeader()
		h.StartedAt, h.DryRun = start, dry
		w, err := newWriter(root, id, h, stepClock(start, time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Close(Footer{FinishedAt: start.Add(time.Minute), Status: status}); err != nil {
			t.Fatal(err)
		}
	}
	seal("done-march", at(3, 30), false, RunCompleted)
	seal("failed-march", at(3, 31), false, RunFailed)
	seal("dry-april", at(4, 2), true, RunCompleted)
	seal("interrupted-april", at(4, 3), false, RunInterrupted)
	going := startRun(t, root, "going-april", at(4, 4))
	if err := going.Sync(); err != nil {
		t.Fatal(err)
	}
	// A sealed file that cannot be read is passed over.
	if err := os.MkdirAll(filepath.Join(root, "2025-05"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "2025-05", "retention-20250501T020000Z-broken.jsonl"), []byte("not json\n"), 0o640); err != nil {
		t.Fatal(err)
	}

	sum, err := LastCompleted(root)
	if err != nil {
		t.Fatal(err)
	}
	if sum == nil || sum.RunID != "done-march" || sum.Footer == nil || !sum.Footer.FinishedAt.Equal(at(3, 30).Add(time.Minute)) {
		t.Fatalf("LastCompleted = %+v, want done-march", sum)
	}

	// A newer completed run, earlier in its folder than a dry one, wins.
	seal("done-april", at(4, 1), false, RunCompleted)
	if sum, err = LastCompleted(root); err != nil || sum == nil || sum.RunID != "done-april" {
		t.Fatalf("LastCompleted = %+v, %v, want done-april", sum, err)
	}
}
