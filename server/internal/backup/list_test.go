package backup

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
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

	// The head's file gone: the trail after it cannot be followed, and the
	// count is marked short.
	files, _ := filepath.Glob(filepath.Join(w.cfg.AuditPath, "*", "retention-*.jsonl"))
	if len(files) != 2 {
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
}
