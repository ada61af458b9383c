package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
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

// In a cluster every per-thread command goes through any node to the
// thread's shard's owner, run from the built binary in node-1's
// environment about a thread of shard 1, which node-2 holds: thread get,
// legal-hold set and list, retention policy get, and backup create
// --shard 1. Before, the thread commands opened node-1's DB_PATH and
// failed "no database at …", and backup create --shard 1 answered 409.
// The same works from a shell with no cluster settings, naming a node with
// --server. Each output names the shard's database.
func TestClusterPerThreadCommandsThroughAnyNode(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	dir := t.TempDir()
	h := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=2", "PROGRESSDB_ADMIN_TOKEN=adm", "PROGRESSDB_CLUSTER_LEASE_TTL=3s")
	reportHeld(t, srv, "node-1", "node-2")
	h.mustRun("cluster", "create", "--nodes", "node-1,node-2")
	node1 := append(append([]string{"PATH=" + os.Getenv("PATH")}, h.environ...), serveNode(t, h)...)
	node2 := serveSecondNode(t, srv, h)
	tid := ""
	for i := 0; tid == ""; i++ {
		if id := fmt.Sprintf("t%d", i); cluster.ShardOf(id, 2) == 1 {
			tid = id
		}
	}
	var addr1 string
	for _, kv := range node1 {
		if v, ok := strings.CutPrefix(kv, "PROGRESSDB_ADDR="); ok {
			addr1 = v
		}
	}
	createThread(t, addr1, tid)
	shard1 := folderID(t, filepath.Join(node2.dbPath, "shards", "1"))

	run := func(environ []string, args ...string) string {
		t.Helper()
		code, out, errOut := runBinary(t, environ, args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
		return out
	}
	var rep threadReport
	if err := json.Unmarshal([]byte(run(node1, "thread", "get", tid, "--json")), &rep); err != nil || rep.Thread.ID != tid || rep.Database.ID != shard1 {
		t.Fatalf("thread get through node-1: %+v %v, want shard 1's database %s", rep, err, shard1)
	}
	if out := run(node1, "legal-hold", "set", tid); !strings.Contains(out, "legal hold:      yes") || !strings.Contains(out, shard1) {
		t.Fatalf("legal-hold set through node-1:\n%s", out)
	}
	if out := run(node1, "legal-hold", "list"); !strings.Contains(out, tid) {
		t.Fatalf("legal-hold list through node-1 lacks %s:\n%s", tid, out)
	}
	if out := run(node1, "retention", "policy", "get", tid); !strings.Contains(out, "thread:          "+tid) || !strings.Contains(out, shard1) {
		t.Fatalf("retention policy get through node-1:\n%s", out)
	}
	var b backupReport
	out := run(node1, "backup", "create", "--shard", "1", "--out", filepath.Join(dir, "s1.tar"), "--json")
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.Manifest.Threads != 1 || b.Database.Shard == nil || *b.Database.Shard != 1 {
		t.Fatalf("backup create --shard 1 through node-1: %v\n%s", err, out)
	}

	// A shell with no cluster settings, naming node-1.
	shell := []string{"PATH=" + os.Getenv("PATH"), "PROGRESSDB_ADMIN_TOKEN=adm", "PROGRESSDB_DB_PATH=" + filepath.Join(dir, "none")}
	if err := json.Unmarshal([]byte(run(shell, "thread", "get", tid, "--json", "--server", "http://"+addr1)), &rep); err != nil ||
		!rep.Thread.LegalHold || rep.Database.ID != shard1 {
		t.Fatalf("thread get --server node-1: %+v %v", rep, err)
	}
	if out := run(shell, "backup", "create", "--shard", "1", "--out", filepath.Join(dir, "s1b.tar"), "--server", "http://"+addr1); !strings.Contains(out, "(shard 1)") {
		t.Fatalf("backup create --shard 1 --server node-1:\n%s", out)
	}
}
