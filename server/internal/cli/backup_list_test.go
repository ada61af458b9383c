package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/retention"
)

// backup list shows each backup in BACKUP_PATH with the purged items it
// still holds: a backup taken before a retention run holds everything
// that run purged, one taken after holds none of it.
func TestBackupList(t *testing.T) {
	dir := t.TempDir()
	backups := filepath.Join(dir, "backups")
	h := newHarness(t, "PROGRESSDB_BACKUP_PATH="+backups, "PROGRESSDB_RETENTION_AUDIT_PATH="+filepath.Join(dir, "audit"),
		"PROGRESSDB_BACKUP_KEEP=7d")
	h.seedDue()
	h.mustRun("backup", "create")
	var res retention.Result
	if err := json.Unmarshal([]byte(h.mustRun("retention", "run", "--json")), &res); err != nil || res.Purged == 0 {
		t.Fatalf("retention run: %v %+v", err, res)
	}
	h.mustRun("backup", "create")

	var l backup.Listing
	out := h.mustRun("backup", "list", "--json")
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("backup list --json: %v\n%s", err, out)
	}
	if l.Path != backups || l.Keep != "7d" || len(l.Backups) != 2 {
		t.Fatalf("listing %+v", l)
	}
	before, after := l.Backups[0], l.Backups[1]
	if before.PurgedItems != res.Purged || !before.PurgedItemsComplete || after.PurgedItems != 0 {
		t.Errorf("purged items held: %d and %d, want %d and 0", before.PurgedItems, after.PurgedItems, res.Purged)
	}
	if d := before.ExpiresAt.Sub(before.CreatedAt); d != 7*24*60*60*1e9 {
		t.Errorf("expires %v after it was made, want 7d", d)
	}

	out = h.mustRun("backup", "list")
	for _, want := range []string{before.File, after.File, "PURGED ITEMS HELD", "deleted after 7d"} {
		if !strings.Contains(out, want) {
			t.Errorf("backup list lacks %q:\n%s", want, out)
		}
	}

	h2 := newHarness(t)
	code, _, errOut := h2.run("backup", "list")
	if code != exitUsage || !strings.Contains(errOut, "PROGRESSDB_BACKUP_PATH") {
		t.Errorf("without BACKUP_PATH: exit %d, %s", code, errOut)
	}
}
