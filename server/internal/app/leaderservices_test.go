package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/router"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// startReplicatedWith is startReplicated with more settings for every
// node; each node's audit root is <its folder>/audit, outside its
// database folder, and its backups go to <its folder>/backups.
func startReplicatedWith(t *testing.T, ids []string, extra ...string) (*etcdtest.Server, []*testNode) {
	t.Helper()
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, err := cluster.EnsureReplicated(ctx, etcd.Client(t), cluster.Keys{Name: "chat"}, testShards, 3, ids); err != nil {
		t.Fatal(err)
	}
	var nodes []*testNode
	for _, id := range ids {
		dir := t.TempDir()
		nodes = append(nodes, startNodeWith(t, etcd, id, dir, replicatedEnv(dir, extra)...))
	}
	for n := range testShards {
		waitLeader(t, etcd, n, 0)
	}
	return etcd, nodes
}

// replicatedEnv is the settings startReplicatedWith gives the node in
// dir, for starting it again.
func replicatedEnv(dir string, extra []string) []string {
	return append([]string{"PROGRESSDB_RETENTION_AUDIT_PATH=" + filepath.Join(dir, "audit"),
		"PROGRESSDB_BACKUP_PATH=" + filepath.Join(dir, "backups")}, extra...)
}

// runShard runs the cluster's retention through node via until shard n's
// part answers 200 (its leader's service starts a moment after it takes
// the lead), and returns that part.
func runShard(t *testing.T, via *testNode, n int) router.ShardRetention {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := call(t, http.MethodPost, via.url()+"/admin/retention/run?wait=true", `{}`, adminAuth)
		var out router.ClusterRetention
		if code == http.StatusOK && json.Unmarshal(body, &out) == nil && len(out.Shards) > n &&
			out.Shards[n].Code == http.StatusOK && out.Shards[n].Result != nil {
			return out.Shards[n]
		}
		if time.Now().After(deadline) {
			t.Fatalf("retention run of shard %d through %s: %d %s", n, via.id, code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// shardTrail is shard n's audit folder on node.
func shardTrail(node *testNode, n int) string {
	return cluster.ShardAuditPath(filepath.Join(node.dir, "audit"), n)
}

// TestReplicatedShardRetentionRunsOnItsLeader: a replicated shard's
// retention runs on the node whose replica leads it; its purge, made
// of proposals, leaves the purged message readable through no node and
// on no replica's disk, and the leader's shard trail verifies.
func TestReplicatedShardRetentionRunsOnItsLeader(t *testing.T) {
	t.Parallel()
	priv, _ := signingKeyFiles(t, t.TempDir())
	etcd, nodes := startReplicatedWith(t, []string{"node-a", "node-b", "node-c"}, "PROGRESSDB_RETENTION_MAX_MESSAGES=1",
		"PROGRESSDB_AUDIT_SIGNING_KEY="+priv)
	const shard = 2
	tid := threadIn(t, shard)
	if code, body := call(t, http.MethodPost, nodes[0].url()+"/v1/threads", fmt.Sprintf(`{"id":%q,"title":"x","author":"u"}`, tid), nil); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	for _, text := range []string{"old-ZQ7", "new-ZQ7"} {
		if code, body := call(t, http.MethodPost, nodes[1].url()+"/v1/threads/"+tid+"/messages",
			fmt.Sprintf(`{"author":"u","body":{"text":%q}}`, text), nil); code != http.StatusCreated {
			t.Fatalf("append: %d %s", code, body)
		}
	}
	part := runShard(t, nodes[2], shard)
	if part.Result.Purged != 1 {
		t.Fatalf("shard %d's run purged %d: %+v", shard, part.Result.Purged, part.Result)
	}
	leader := waitLeader(t, etcd, shard, 0)
	for _, n := range nodes {
		code, body := call(t, http.MethodGet, n.url()+"/v1/threads/"+tid+"/messages", "", nil)
		if code != http.StatusOK || bytes.Contains(body, []byte("old-ZQ7")) || !bytes.Contains(body, []byte("new-ZQ7")) {
			t.Fatalf("messages through %s after the purge: %d %s", n.id, code, body)
		}
	}
	var lead *testNode
	for _, n := range nodes {
		if n.id == leader.Node {
			lead = n
		}
	}
	if !strings.HasPrefix(part.Result.AuditFile, shardTrail(lead, shard)) || part.Node != lead.id {
		t.Fatalf("shard %d's run on %s wrote %s, its leader is %s", shard, part.Node, part.Result.AuditFile, lead.id)
	}
	sameTrails(t, nodes, shard, 1)
	// Every replica erased the run's purge before its leader wrote the
	// footer (spec §15).
	if r := footerReplicas(t, part.Result.AuditFile); r == nil || len(r.Erased) != 3 || len(r.Pending) != 0 {
		t.Fatalf("the first run's footer says of the replicas %+v, want three erased", r)
	}
	// The leader's node stops: the next leader's replica runs the
	// shard's retention.
	lead.shutdown()
	next := waitLeader(t, etcd, shard, leader.Term)
	var via *testNode
	for _, n := range nodes {
		if n != lead {
			via = n
		}
	}
	// Until the next leader applied an entry of its term it answers 503
	// with Retry-After, which a client retries (with an Idempotency-Key:
	// an ambiguous outcome is a 503 too).
	retry := http.Header{"Idempotency-Key": {"newer-ZQ7"}}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, body := call(t, http.MethodPost, via.url()+"/v1/threads/"+tid+"/messages", `{"author":"u","body":{"text":"newer-ZQ7"}}`, retry)
		if code == http.StatusCreated {
			break
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("append after the leader stopped: %d %s", code, body)
		}
	}
	part = runShard(t, via, shard)
	var nextNode *testNode
	for _, n := range nodes {
		if n.id == next.Node {
			nextNode = n
		}
	}
	if part.Result.Purged != 1 || nextNode == nil || !strings.HasPrefix(part.Result.AuditFile, shardTrail(nextNode, shard)) || part.Node != next.Node {
		t.Fatalf("shard %d's run on %s after %s stopped (next leader %s): %+v", shard, part.Node, lead.id, next.Node, part.Result)
	}
	var running []*testNode
	for _, n := range nodes {
		if n != lead {
			running = append(running, n)
		}
	}
	// The next leader's file follows the first in the one trail, and
	// its footer has the stopped node's replica owe the erase.
	sameTrails(t, running, shard, 2)
	if r := footerReplicas(t, part.Result.AuditFile); r == nil || len(r.Erased) != 2 || !slices.Equal(r.Pending, []uint64{leader.Replica}) {
		t.Fatalf("the second run's footer says of the replicas %+v, want two erased and %d pending", r, leader.Replica)
	}
	for _, n := range nodes {
		n.shutdown()
	}
	for _, n := range nodes {
		st := openShard(t, n, shard)
		msgs, _, err := st.ListMessages(context.Background(), tid, store.ListOptions{Limit: 10})
		if err != nil || len(msgs) != 1 {
			t.Errorf("%s's replica of %s: %d messages, %v", n.id, tid, len(msgs), err)
		}
	}
}

// sameTrails waits until shard n's audit folder on every node holds the
// same files, byte for byte (followers apply a moment after the leader
// answered), and checks that the folder verifies with want sealed,
// signed files.
func sameTrails(t *testing.T, nodes []*testNode, n, want int) {
	t.Helper()
	read := func(node *testNode) map[string][]byte {
		files := map[string][]byte{}
		root := shardTrail(node, n)
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				b, rerr := os.ReadFile(p)
				if rerr == nil {
					rel, _ := filepath.Rel(root, p)
					files[rel] = b
				}
			}
			return nil
		})
		return files
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		first, same := read(nodes[0]), true
		for _, node := range nodes[1:] {
			same = same && maps.EqualFunc(first, read(node), bytes.Equal)
		}
		if same && len(first) == want {
			break
		}
		if time.Now().After(deadline) {
			for _, node := range nodes {
				t.Logf("%s: %d files", node.id, len(read(node)))
			}
			t.Fatalf("shard %d's trails differ or do not hold %d files", n, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, node := range nodes {
		rep, err := audit.VerifyDirWith(shardTrail(node, n), audit.VerifyOptions{})
		if err != nil || len(rep.Problems) > 0 || rep.Files != want || rep.Verified != want {
			t.Fatalf("%s's shard %d trail: %+v %v", node.id, n, rep, err)
		}
		for name, b := range read(node) {
			if !strings.HasSuffix(name, ".jsonl") || !bytes.Contains(b, []byte(`"signature":`)) {
				t.Fatalf("%s's %s: not a sealed, signed file", node.id, name)
			}
		}
	}
}

// appendMessage appends text to thread tid through via, retrying while
// the shard answers 503 (a leader change), under one Idempotency-Key.
func appendMessage(t *testing.T, via *testNode, tid, text string) {
	t.Helper()
	h := http.Header{"Idempotency-Key": {"append-" + text}}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, body := call(t, http.MethodPost, via.url()+"/v1/threads/"+tid+"/messages",
			fmt.Sprintf(`{"author":"u","body":{"text":%q}}`, text), h)
		if code == http.StatusCreated {
			return
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("append %q to %s through %s: %d %s", text, tid, via.id, code, body)
		}
	}
}

// A replica that joined its group while its node ran (a move to the
// node) and then leads it runs the shard's retention: the node's leader
// services follow the leases its host tells, not only the replicas it
// started with. The joined replica is made to lead without a transfer:
// with one other replica stopped, a write commits on the leader and the
// joined one; the leader then stops and the other starts again, whose
// log lacks the write, so only the joined replica can win the election.
func TestJoinedReplicaLeadsAndRunsRetention(t *testing.T) {
	t.Parallel()
	extra := []string{"PROGRESSDB_RETENTION_MAX_MESSAGES=1"}
	etcd, nodes := startReplicatedWith(t, []string{"node-a", "node-b", "node-c", "node-d"}, extra...)
	const shard = 0 // its set: node-a, node-b, node-c
	tid := threadIn(t, shard)
	seedThread(t, nodes[1], tid)
	if code, body := call(t, http.MethodPost, nodes[1].url()+"/admin/cluster/shards/0/move", `{"to":"node-d"}`, adminAuth); code != http.StatusOK {
		t.Fatalf("move shard 0 to node-d: %d %s", code, body)
	}
	joined := nodes[3]
	if l := waitLeader(t, etcd, shard, 0); l.Node != joined.id {
		var lead, other int
		for i, n := range nodes[1:3] {
			if n.id == l.Node {
				lead, other = i+1, 2-i
			}
		}
		t.Logf("shard %d led by %s: %s stops, then %s", shard, l.Node, nodes[other].id, nodes[lead].id)
		nodes[other].shutdown()
		appendMessage(t, joined, tid, "without-"+nodes[other].id)
		nodes[lead].shutdown()
		nodes[other] = startNodeWith(t, etcd, nodes[other].id, nodes[other].dir, replicatedEnv(nodes[other].dir, extra)...)
		if next := waitLeader(t, etcd, shard, l.Term); next.Node != joined.id {
			t.Fatalf("shard %d's next leader is %s, not the joined replica's node", shard, next.Node)
		}
	}
	appendMessage(t, joined, tid, "newest-JR4")
	part := runShard(t, nodes[0], shard)
	if part.Result.Purged == 0 || !strings.HasPrefix(part.Result.AuditFile, shardTrail(joined, shard)) {
		t.Fatalf("shard %d's run, led by the joined replica: %+v", shard, part.Result)
	}
	code, body := call(t, http.MethodGet, joined.url()+"/v1/threads/"+tid+"/messages", "", nil)
	if code != http.StatusOK || bytes.Contains(body, []byte(`"hi"`)) || !bytes.Contains(body, []byte("newest-JR4")) {
		t.Fatalf("messages after the joined leader's purge: %d %s", code, body)
	}
}
