package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// backupsOf lists the backups of shard n in node's BACKUP_PATH, oldest
// first.
func backupsOf(t *testing.T, node *testNode, n int) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cluster.ShardBackupPath(filepath.Join(node.dir, "backups"), n), "progressdb-backup-*.tar*"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	return files
}

// A replicated shard's scheduled backups are its leader's: every shard's
// backups are in its leader node's <BACKUP_PATH>/shards/<n>/ and in no
// other replica's, one per schedule. A backup asked through a follower's
// node is forwarded to the leader. A leader's backup verifies, and
// restored into a fresh folder it is a one-node copy holding the shard's
// thread.
func TestReplicatedShardBackupsAreTheLeaders(t *testing.T) {
	t.Parallel()
	etcd, nodes := startReplicatedWith(t, []string{"node-a", "node-b", "node-c"}, "PROGRESSDB_BACKUP_CRON=@every 1s",
		"PROGRESSDB_BACKUP_KEEP=1h", "PROGRESSDB_RETENTION_MAX_MESSAGES=1")
	const shard = 1
	tid := threadIn(t, shard)
	seedThread(t, nodes[0], tid)
	byID := nodesByID(nodes)
	leader := byID[waitLeader(t, etcd, shard, 0).Node]
	var follower *testNode
	for _, n := range nodes {
		if n != leader {
			follower = n
		}
	}
	code, body := call(t, http.MethodPost, follower.url()+fmt.Sprintf("/admin/backups?shard=%d", shard), "", adminAuth)
	var m backup.Manifest
	if code != http.StatusCreated || json.Unmarshal(body, &m) != nil || m.Threads != 1 {
		t.Fatalf("POST /admin/backups?shard=%d through %s: %d %s", shard, follower.id, code, body)
	}
	asked := filepath.Join(cluster.ShardBackupPath(filepath.Join(leader.dir, "backups"), shard), backup.FileName(m.CreatedAt, m.BackupID))
	if _, err := os.Stat(asked); err != nil {
		t.Fatalf("the backup asked of %s is not in its leader %s's folder: %v", follower.id, leader.id, err)
	}
	waitFor(t, func() bool { return len(backupsOf(t, leader, shard)) >= 3 }, "two scheduled backups of the shard by its leader")
	for n := range testShards {
		lead := waitLeader(t, etcd, n, 0)
		waitFor(t, func() bool { return len(backupsOf(t, byID[lead.Node], n)) > 0 }, fmt.Sprintf("a backup of shard %d", n))
		for _, node := range nodes {
			if got := len(backupsOf(t, node, n)); (node.id == lead.Node) != (got > 0) {
				t.Fatalf("shard %d (led by %s, term %d): %d backups on %s", n, lead.Node, lead.Term, got, node.id)
			}
		}
	}
	files := backupsOf(t, leader, shard)
	newest := files[len(files)-1]
	rep, err := backup.Verify(context.Background(), newest, nil, t.TempDir())
	if err != nil || !rep.Valid || rep.Manifest.Threads != 1 {
		t.Fatalf("verify %s: %+v %v", newest, rep, err)
	}
	// The leader purges the seeded message after the backup asked for
	// was taken: its restore replays the purge, as any backup's.
	appendMessage(t, follower, tid, "newer-BK3")
	if part := runShard(t, follower, shard); part.Result.Purged != 1 {
		t.Fatalf("shard %d's run: %+v", shard, part.Result)
	}
	restoreOneNodeCopy(t, asked, shardTrail(leader, shard), tid)
}

// restoreOneNodeCopy restores a replicated shard's backup into a fresh
// folder against the shard's trail, as `progressdb restore` does, and
// checks the copy: it holds thread tid without the message the trail
// purged after the backup, and no Raft state (a database of its own, not
// a replica).
func restoreOneNodeCopy(t *testing.T, file, trail, tid string) {
	t.Helper()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "copy")
	blobs, err := attachments.Open(ctx, "file://"+filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	defer blobs.Close()
	cfg, err := config.Load([]string{"PROGRESSDB_DB_PATH=" + db, "PROGRESSDB_RETENTION_AUDIT_PATH=" + trail})
	if err != nil {
		t.Fatal(err)
	}
	res, err := backup.Restore(ctx, backup.RestoreOptions{File: file, DB: db, Retention: cfg.Retention,
		NewReplayer: func(st *store.Store, rc config.Retention) (backup.Replayer, error) {
			return NewRetention(Stores{Store: st, Blobs: blobs}, rc, testLogger(t), prometheus.NewRegistry(), false, nil)
		}})
	if err != nil {
		t.Fatalf("restore %s: %+v %v", file, res, err)
	}
	st, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.GetThread(ctx, tid); err != nil {
		t.Fatalf("thread %s in the restored copy: %v", tid, err)
	}
	if msgs, _, err := st.ListMessages(ctx, tid, store.ListOptions{Limit: 10}); err != nil || len(msgs) != 0 ||
		res.Replay == nil || res.Replay.Purged != 1 {
		t.Fatalf("the restored copy of %s: messages %+v, %v; replay %+v", tid, msgs, err, res.Replay)
	}
	l, err := st.RaftLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last, err := l.LastIndex()
	hard, conf, serr := l.InitialState()
	if err != nil || serr != nil || last != 0 || l.Applied() != 0 || hard.GetTerm() != 0 || len(conf.GetVoters()) != 0 {
		t.Fatalf("the restored copy's Raft state: last %d, applied %d, hard %v, conf %v (%v, %v)", last, l.Applied(), hard, conf, err, serr)
	}
}
