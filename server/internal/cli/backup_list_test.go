package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store"
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

type noHold struct{}

func (noHold) Hold(context.Context) (audit.Head, func(), error) { return audit.Head{}, func() {}, nil }

// On a cluster node, backup list shows every shard's backups under
// BACKUP_PATH/shards/<n>/, each with its shard.
func TestBackupListCluster(t *testing.T) {
	dir := t.TempDir()
	backups := filepath.Join(dir, "backups")
	st, err := store.Open(cluster.ShardDBPath(filepath.Join(dir, "data"), 3), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, err := backup.NewCreator(backup.Options{Store: st, Hold: noHold{}, Path: cluster.ShardBackupPath(backups, 3)})
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := c.CreateInPath(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, "PROGRESSDB_BACKUP_PATH="+backups, "PROGRESSDB_RETENTION_AUDIT_PATH="+filepath.Join(dir, "audit"),
		"PROGRESSDB_DB_PATH="+filepath.Join(dir, "data"),
		"PROGRESSDB_CLUSTER_ETCD=http://127.0.0.1:2379", "PROGRESSDB_NODE_ID=node-1",
		"PROGRESSDB_ADVERTISE_URL=http://127.0.0.1:8080", "PROGRESSDB_CLUSTER_SECRET=0123456789abcdef-secret")
	var l backup.Listing
	out := h.mustRun("backup", "list", "--json")
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("backup list --json: %v\n%s", err, out)
	}
	if len(l.Backups) != 1 || l.Backups[0].Shard == nil || *l.Backups[0].Shard != 3 || l.Backups[0].BackupID != m.BackupID ||
		l.Backups[0].File != "shards/3/"+backup.FileName(m.CreatedAt, m.BackupID) {
		t.Fatalf("listing %s", out)
	}
	if out := h.mustRun("backup", "list"); !strings.Contains(out, l.Backups[0].File) {
		t.Fatalf("backup list lacks %s:\n%s", l.Backups[0].File, out)
	}
}
