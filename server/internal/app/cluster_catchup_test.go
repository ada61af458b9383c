package app

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
)

// startNodeWith is startNode with more settings (later ones win).
func startNodeWith(t *testing.T, etcd *etcdtest.Server, id, dir string, extra ...string) *testNode {
	t.Helper()
	return startNodeLogging(t, etcd, id, dir, testLogger(t), extra...)
}

// startClusterWith is startCluster with more settings for every node; each
// node's audit root is outside its database folder, and its backups go to
// <dir>/backups.
func startClusterWith(t *testing.T, ids []string, extra ...string) (*etcdtest.Server, []*testNode) {
	t.Helper()
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.CreateCluster(ctx, etcd.Client(t), cluster.Keys{Name: "chat"}, testShards, ids); err != nil {
		t.Fatal(err)
	}
	var nodes []*testNode
	for _, id := range ids {
		dir := t.TempDir()
		env := append([]string{"PROGRESSDB_RETENTION_AUDIT_PATH=" + filepath.Join(dir, "audit"),
			"PROGRESSDB_BACKUP_PATH=" + filepath.Join(dir, "backups")}, extra...)
		nodes = append(nodes, startNodeWith(t, etcd, id, dir, env...))
	}
	waitOwned(t, etcd, testShards)
	return etcd, nodes
}

// A shard's folder copied back by hand, from before a purge, is caught at
// start: the node replays the purges the shard's own audit trail records
// after the copy's head (trigger "start") before it answers, so the purged
// message is never served again.
func TestClusterStartReplaysAShardCopiedBack(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.CreateCluster(ctx, etcd.Client(t), cluster.Keys{Name: "chat"}, testShards, []string{"node-a"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	auditRoot := filepath.Join(dir, "audit")
	env := []string{"PROGRESSDB_RETENTION_AUDIT_PATH=" + auditRoot, "PROGRESSDB_RETENTION_MAX_MESSAGES=1"}
	start := func() *testNode {
		n := startNodeWith(t, etcd, "node-a", dir, env...)
		waitOwned(t, etcd, testShards)
		return n
	}

	node := start()
	tid := threadIn(t, 2)
	if code, body := call(t, http.MethodPost, node.url()+"/v1/threads", fmt.Sprintf(`{"id":%q,"title":"x","author":"u"}`, tid), nil); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	for _, text := range []string{"old", "new"} {
		if code, body := call(t, http.MethodPost, node.url()+"/v1/threads/"+tid+"/messages",
			fmt.Sprintf(`{"author":"u","body":{"text":%q}}`, text), nil); code != http.StatusCreated {
			t.Fatalf("append: %d %s", code, body)
		}
	}
	node.shutdown()
	shardDB := cluster.ShardDBPath(filepath.Join(dir, "data"), 2)
	saved := filepath.Join(t.TempDir(), "shard-2")
	if err := os.CopyFS(saved, os.DirFS(shardDB)); err != nil {
		t.Fatal(err)
	}

	node = start()
	code, body := call(t, http.MethodPost, node.url()+"/admin/retention/run?wait=true", `{}`, adminAuth)
	if code != http.StatusOK || !bytes.Contains(body, []byte(`"purged":1`)) {
		t.Fatalf("retention run: %d %s", code, body)
	}
	node.shutdown()

	// The copy from before the purge goes back in place of the shard.
	if err := os.RemoveAll(shardDB); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(shardDB, os.DirFS(saved)); err != nil {
		t.Fatal(err)
	}
	node = start()
	code, body = call(t, http.MethodGet, node.url()+"/v1/threads/"+tid+"/messages", "", nil)
	if code != http.StatusOK || bytes.Contains(body, []byte(`"old"`)) || !bytes.Contains(body, []byte(`"new"`)) {
		t.Fatalf("messages after the copy went back: %d %s", code, body)
	}
	files, err := filepath.Glob(filepath.Join(cluster.ShardAuditPath(auditRoot, 2), "*", "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var replays int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		header, _, _ := bytes.Cut(b, []byte("\n"))
		if bytes.Contains(header, []byte(`"trigger":"`+audit.TriggerStart+`"`)) && bytes.Contains(header, []byte(`"shard":2`)) &&
			bytes.Contains(b, []byte(`"replayed":true`)) {
			replays++
		}
	}
	if replays != 1 {
		t.Fatalf("%d start replays in shard 2's trail %v, want 1", replays, files)
	}
}
