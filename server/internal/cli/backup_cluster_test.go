package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
)

// On a cluster node, backup create --shard N backs shard N up through the
// node holding it, into BACKUP_PATH/shards/N/; the backup verifies and
// backup list shows it with its shard. Without --shard a cluster node's
// backup create is a usage error.
func TestClusterBackupCreateThroughANode(t *testing.T) {
	srv := etcdtest.Start(t)
	dir := t.TempDir()
	backups := filepath.Join(dir, "backups")
	h := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=2", "PROGRESSDB_ADMIN_TOKEN=adm",
		"PROGRESSDB_CLUSTER_LEASE_TTL=3s", "PROGRESSDB_BACKUP_PATH="+backups,
		"PROGRESSDB_RETENTION_AUDIT_PATH="+filepath.Join(dir, "audit"))
	reportHeld(t, srv, "node-1")
	h.mustRun("cluster", "create", "--nodes", "node-1")
	ask := &harness{t: t, dbPath: h.dbPath, environ: append(append([]string{}, h.environ...), serveNode(t, h)...)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		st, err := cluster.ReadStatus(ctx, srv.Client(t), cluster.Keys{Name: "progressdb"})
		if err == nil && st.Shards[1].State == cluster.ShardOwned {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("shard 1 not owned: %+v %v", st, err)
		}
	}

	var rep backupReport
	out := ask.mustRun("backup", "create", "--shard", "1", "--json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("backup create --json: %v\n%s", err, out)
	}
	if filepath.Dir(rep.File) != cluster.ShardBackupPath(backups, 1) {
		t.Fatalf("backup file %s, want it in %s", rep.File, cluster.ShardBackupPath(backups, 1))
	}
	ask.mustRun("backup", "verify", rep.File)
	if code, _, errOut := ask.run("backup", "create"); code != exitUsage || !strings.Contains(errOut, "--shard") {
		t.Fatalf("backup create without --shard on a cluster node: exit %d, %s", code, errOut)
	}
	out = ask.mustRun("backup", "list")
	if !strings.Contains(out, "shards/1/"+filepath.Base(rep.File)) {
		t.Fatalf("backup list lacks the shard's backup:\n%s", out)
	}
}
