package backup

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
)

// backup list counts, for each backup, the items the audit trail records
// purged after its head: the ones it still holds. A backup taken after a
// run holds none of that run's purges; replays are not counted twice.
func TestListCountsPurgedItemsHeld(t *testing.T) {
	w := newWorld(t, false)
	ctx := context.Background()
	for _, tid := range []string{"t1", "t2", "t3", "t4"} {
		w.thread(tid, 2)
	}
	w.run() // purges nothing: the first head
	mA, _ := w.backupAt(w.now)

	// Three deleted threads and one deleted message, purged 31 days later.
	for _, tid := range []string{"t1", "t2", "t3"} {
		if _, err := w.st.DeleteThread(ctx, tid); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.st.DeleteMessage(ctx, "t4", "t4-m0"); err != nil {
		t.Fatal(err)
	}
	w.now = w.now.Add(31 * day)
	if res := w.run(); res.Purged != 4 {
		t.Fatalf("run purged %d, want 3 threads and 1 message", res.Purged)
	}
	mB, _ := w.backupAt(w.now)
	w.now = w.now.Add(time.Hour)

	l, err := List(w.creator.Path(), w.cfg.AuditPath, 30*day, w.now)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Backups) != 2 || l.Keep != "30d" || l.Path != w.creator.Path() {
		t.Fatalf("listing %+v", l)
	}
	a, b := l.Backups[0], l.Backups[1]
	if a.BackupID != mA.BackupID || b.BackupID != mB.BackupID {
		t.Fatalf("order %s, %s; want %s then %s", a.BackupID, b.BackupID, mA.BackupID, mB.BackupID)
	}
	if a.PurgedItems != 4 || !a.PurgedItemsComplete {
		t.Errorf("backup before the purge holds %d purged items (complete %t), want 4", a.PurgedItems, a.PurgedItemsComplete)
	}
	if b.PurgedItems != 0 || !b.PurgedItemsComplete {
		t.Errorf("backup after the purge holds %d purged items (complete %t), want 0", b.PurgedItems, b.PurgedItemsComplete)
	}
	if want := int64((31*day + time.Hour) / time.Second); a.Age != want {
		t.Errorf("age %d s, want %d", a.Age, want)
	}
	if !a.ExpiresAt.Equal(mA.CreatedAt.Add(30 * day)) {
		t.Errorf("expires at %v, want created + 30d", a.ExpiresAt)
	}
	info, err := os.Stat(filepath.Join(l.Path, a.File))
	if err != nil || info.Size() != a.Size || a.Size == 0 {
		t.Errorf("size %d, file %v %v", a.Size, info, err)
	}

	// A third backup after one more purge: every count, read in one pass
	// over the trail, is what audit.Pending says for that backup alone.
	if _, err := w.st.DeleteThread(ctx, "t4"); err != nil {
		t.Fatal(err)
	}
	w.now = w.now.Add(31 * day)
	w.run()
	w.backupAt(w.now)
	samePending := func(l Listing) {
		t.Helper()
		for _, e := range l.Backups {
			n, whole, err := audit.Pending(w.cfg.AuditPath, e.AuditHead, "")
			if err != nil || n != e.PurgedItems || whole != e.PurgedItemsComplete {
				t.Errorf("%s: %d purged items (complete %t), audit.Pending says %d (%t, %v)", e.BackupID, e.PurgedItems, e.PurgedItemsComplete, n, whole, err)
			}
		}
	}
	if l, err = List(w.creator.Path(), w.cfg.AuditPath, 30*day, w.now); err != nil || len(l.Backups) != 3 {
		t.Fatalf("listing: %v %+v", err, l)
	}
	if l.Backups[0].PurgedItems <= 4 || l.Backups[1].PurgedItems == 0 || l.Backups[2].PurgedItems != 0 {
		t.Errorf("purged items held %d, %d, %d", l.Backups[0].PurgedItems, l.Backups[1].PurgedItems, l.Backups[2].PurgedItems)
	}
	samePending(l)

	// The head's file gone: the trail after it cannot be followed, and the
	// count is marked short.
	files, _ := filepath.Glob(filepath.Join(w.cfg.AuditPath, "*", "retention-*.jsonl"))
	if len(files) != 3 {
		t.Fatalf("audit files %v", files)
	}
	if err := os.Remove(files[0]); err != nil {
		t.Fatal(err)
	}
	l, err = List(w.creator.Path(), w.cfg.AuditPath, 30*day, w.now)
	if err != nil {
		t.Fatal(err)
	}
	if l.Backups[0].PurgedItemsComplete {
		t.Errorf("backup before the purge: count marked complete with its head's file gone (%d)", l.Backups[0].PurgedItems)
	}
	samePending(l)
}

// BenchmarkList lists 30 backups (daily, the default KEEP) against a trail
// of a year of daily runs that each purged 3 items, as backup list and
// GET /admin/backups do:
// go test ./server/internal/backup -run '^$' -bench BenchmarkList -benchtime 20x
func BenchmarkList(b *testing.B) {
	dir := b.TempDir()
	root, folder := filepath.Join(dir, "audit"), filepath.Join(dir, "backups")
	if err := os.Mkdir(folder, 0o700); err != nil {
		b.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC)
	const runs, backups = 365, 30
	for i := range runs {
		at := t0.Add(time.Duration(i) * day)
		aw, err := audit.Create(root, fmt.Sprintf("%012x", i+1), audit.Header{StartedAt: at})
		if err != nil {
			b.Fatal(err)
		}
		for j := range 3 {
			if err := aw.Item(audit.Item{ItemType: audit.ItemThread, ItemID: fmt.Sprintf("t%d-%d", i, j),
				ThreadID: fmt.Sprintf("t%d-%d", i, j), Status: audit.StatusPurged, KeysDeleted: 1}); err != nil {
				b.Fatal(err)
			}
		}
		f := aw.Counts()
		f.Status, f.FinishedAt = audit.RunCompleted, at.Add(time.Second)
		path, err := aw.Close(f)
		if err != nil {
			b.Fatal(err)
		}
		if k := i - (runs - backups); k >= 0 {
			m := Manifest{Format: formatV1, BackupID: fmt.Sprintf("%012x", k+1), CreatedAt: at.Add(time.Hour),
				AuditHead: audit.HeadOf(root, path, fmt.Sprintf("%012x", i+1), aw.LastHash()),
				Files:     []File{{Name: dbDir + "MANIFEST-000001", SHA256: strings.Repeat("0", 64)}}}
			line, err := m.encode(nil)
			if err != nil {
				b.Fatal(err)
			}
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			if err := writeEntry(tw, ManifestName, int64(len(line)), m.CreatedAt, bytes.NewReader(line)); err != nil {
				b.Fatal(err)
			}
			if err := tw.Close(); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(folder, FileName(m.CreatedAt, m.BackupID)), buf.Bytes(), 0o600); err != nil {
				b.Fatal(err)
			}
		}
	}
	now := t0.Add(runs * day)
	b.ResetTimer()
	for b.Loop() {
		l, err := List(folder, root, 30*day, now)
		if err != nil {
			b.Fatal(err)
		}
		if len(l.Backups) != backups {
			b.Fatalf("listing: %d backups", len(l.Backups))
		}
		for i, e := range l.Backups {
			if want := int64(3 * (backups - 1 - i)); e.PurgedItems != want || !e.PurgedItemsComplete {
				b.Fatalf("backup %d holds %d purged items (complete %t), want %d", i, e.PurgedItems, e.PurgedItemsComplete, want)
			}
		}
	}
}
