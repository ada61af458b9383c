package app

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"gocloud.dev/secrets"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// startSealedReplicated starts a replicated cluster of the nodes named
// with PROGRESSDB_KEK set, each node with its own key store folder
// (<dir>/keys), deletions due a second after they are made, and waits
// for every shard's leader.
func startSealedReplicated(t *testing.T, ids ...string) (*etcdtest.Server, []*testNode) {
	t.Helper()
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, err := cluster.EnsureReplicated(ctx, etcd.Client(t), cluster.Keys{Name: "chat"}, testShards, 3, ids); err != nil {
		t.Fatal(err)
	}
	var nodes []*testNode
	for _, id := range ids {
		nodes = append(nodes, startSealedNode(t, etcd, id, t.TempDir()))
	}
	for n := range testShards {
		waitLeader(t, etcd, n, 0)
	}
	return etcd, nodes
}

// startSealedNode starts node id of startSealedReplicated's cluster on
// its folder dir.
func startSealedNode(t *testing.T, etcd *etcdtest.Server, id, dir string) *testNode {
	t.Helper()
	return startNodeWith(t, etcd, id, dir, "PROGRESSDB_RETENTION_AUDIT_PATH="+filepath.Join(dir, "audit"),
		"PROGRESSDB_KEK="+sealKEK(), "PROGRESSDB_KEYSTORE_PATH="+filepath.Join(dir, "keys"),
		"PROGRESSDB_RETENTION_PERIOD=1s", "PROGRESSDB_RETENTION_MESSAGE_PERIOD=1s",
		"PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD=true", "PROGRESSDB_RETENTION_CRON=@every 1h")
}

// sealedThread creates thread id through via with a sealed title, author
// and body that name it.
func sealedThread(t *testing.T, via *testNode, id string) {
	t.Helper()
	code, body := call(t, http.MethodPost, via.url()+"/v1/threads",
		fmt.Sprintf(`{"id":%q,"title":"%s-%s","author":"%s"}`, id, sealTitle, id, sealAuthor), nil)
	if code != http.StatusCreated {
		t.Fatalf("create %s through %s: %d %s", id, via.id, code, body)
	}
	appendSealed(t, via, id)
}

func appendSealed(t *testing.T, via *testNode, id string) {
	t.Helper()
	code, body := retryCall(t, http.MethodPost, via.url()+"/v1/threads/"+id+"/messages",
		fmt.Sprintf(`{"author":"%s","body":{"text":"%s-%s"}}`, sealAuthor, sealBody, id), nil)
	if code != http.StatusCreated {
		t.Fatalf("append to %s through %s: %d %s", id, via.id, code, body)
	}
}

// readSealed reads thread id's messages through via until they answer
// (a leader's change is a retry) and checks that they open.
func readSealed(t *testing.T, via *testNode, id string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, body := call(t, http.MethodGet, via.url()+"/v1/threads/"+id+"/messages", "", nil)
		if code == http.StatusOK {
			if !strings.Contains(string(body), sealBody+"-"+id) || !strings.Contains(string(body), sealAuthor) {
				t.Fatalf("read %s through %s: %s", id, via.id, body)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("read %s through %s: %d %s", id, via.id, code, body)
		}
	}
}

// keyEntry reads a stopped node's raw key store entry of thread tid's key
// num in shard n: the author's HMAC and the wrapped DEK.
func keyEntry(t *testing.T, node *testNode, n int, tid string) string {
	t.Helper()
	db, err := pebble.Open(cluster.ShardKeystorePath(filepath.Join(node.dir, "keys"), n), &pebble.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, closer, err := db.Get([]byte("k:" + tid + ":k:0000000001"))
	if err != nil {
		t.Fatalf("%s's key of %s: %v", node.id, tid, err)
	}
	defer closer.Close()
	return string(v[32:])
}

// TestSealedReplicatedShards: with PROGRESSDB_KEK on a replicated
// cluster, sealed writes through every node read back through every
// node, and each replica's key store holds the same key, applied from
// the log: no data folder holds a wrapped key or any content in clear.
// After the leader's node of a shard stops, the next leader opens
// every sealed message and finds the author's key (the author index
// key is the cluster's, not a replica's own). A thread purge destroys
// the thread's keys on every replica: no file of any node's data or
// key store folder then holds the thread's key entries or its wrapped
// DEK.
func TestSealedReplicatedShards(t *testing.T) {
	etcd, nodes := startSealedReplicated(t, "node-a", "node-b", "node-c")
	var ids []string
	for i := range 6 {
		id := fmt.Sprintf("t%02d", i)
		sealedThread(t, nodes[i%len(nodes)], id)
		ids = append(ids, id)
	}
	for _, n := range nodes {
		for _, id := range ids {
			readSealed(t, n, id)
		}
	}
	purged := ids[0]
	shard := cluster.ShardOf(purged, testShards)

	// The wrapped DEK as node-c's key store holds it, read while the
	// node is stopped; it is in no data folder, only in key stores.
	c := nodes[2]
	c.shutdown()
	wrapped := keyEntry(t, c, shard, purged)
	storetest.RequireAll(t, filepath.Join(c.dir, "keys"), wrapped)
	for _, n := range nodes {
		storetest.RequireNone(t, filepath.Join(n.dir, "data"), wrapped, sealTitle, sealAuthor, sealBody)
	}
	nodes[2] = startSealedNode(t, etcd, c.id, c.dir)

	// The leader's node of the purged thread's shard stops: the next
	// leader reads every sealed message and writes under the author's
	// key it finds.
	old := waitLeader(t, etcd, shard, 0)
	var stopped *testNode
	for _, n := range nodes {
		if n.id == old.Node {
			stopped = n
			n.shutdown()
		}
	}
	next := waitLeader(t, etcd, shard, old.Term)
	var live []*testNode
	for _, n := range nodes {
		if n != stopped {
			live = append(live, n)
		}
	}
	for _, id := range ids {
		readSealed(t, live[0], id)
		appendSealed(t, live[1], id)
	}
	nodes = live
	nodes = append(nodes, startSealedNode(t, etcd, stopped.id, stopped.dir))
	t.Logf("shard %d: leader %s (term %d), then %s (term %d)", shard, old.Node, old.Term, next.Node, next.Term)

	// The purge, through a node, once the deletion is due.
	if code, body := retryCall(t, http.MethodDelete, nodes[0].url()+"/v1/threads/"+purged, "", nil); code != http.StatusNoContent {
		t.Fatalf("delete %s: %d %s", purged, code, body)
	}
	time.Sleep(1100 * time.Millisecond)
	if res := runShard(t, nodes[1], shard); res.Result.Purged < 1 {
		t.Fatalf("shard %d's run purged nothing: %+v", shard, res.Result)
	}
	for _, n := range nodes {
		if code, _ := call(t, http.MethodGet, n.url()+"/v1/threads/"+purged, "", nil); code != http.StatusNotFound {
			t.Fatalf("purged thread %s through %s: %d", purged, n.id, code)
		}
	}
	// Every replica erases its key store and its log (in the
	// background): then no file under any node holds the thread's keys.
	keyNeedles := []string{"k:" + purged + ":", wrapped}
	for _, n := range nodes {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			rep, err := storetest.Scan(filepath.Join(n.dir, "keys"), keyNeedles)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Found()) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s's key store still holds %v", n.id, rep.Found())
			}
		}
	}
	for _, n := range nodes {
		n.shutdown()
	}
	secret := replicaSecret(t, etcd)
	for _, n := range nodes {
		storetest.RequireNone(t, filepath.Join(n.dir, "keys"), keyNeedles...)
		storetest.RequireNone(t, filepath.Join(n.dir, "data"), wrapped, sealTitle, sealAuthor, sealBody)
		// One key of the author per thread left, the same on every
		// replica: the new leader found the author's key.
		ks, err := keystore.Open(context.Background(), cluster.ShardKeystorePath(filepath.Join(n.dir, "keys"), shard),
			keystore.Options{Keeper: keeper(t), GroupSecret: secret, MustExist: true})
		if err != nil {
			t.Fatal(err)
		}
		refs, err := ks.AuthorKeys(context.Background(), sealAuthor)
		_ = ks.Close()
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		for _, id := range ids[1:] {
			if cluster.ShardOf(id, testShards) == shard {
				want++
			}
		}
		if len(refs) != want {
			t.Errorf("%s holds the author's keys %v in shard %d, want one for each of its %d threads left", n.id, refs, shard, want)
		}
		for _, r := range refs {
			if r.Number != 1 || r.Thread == purged {
				t.Errorf("%s holds the author's key %+v", n.id, r)
			}
		}
	}
}

func keeper(t *testing.T) *secrets.Keeper {
	t.Helper()
	k, err := keystore.OpenKEK(context.Background(), sealKEK())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return k
}

// replicaSecret is the cluster's replica secret, from etcd.
func replicaSecret(t *testing.T, etcd *etcdtest.Server) []byte {
	t.Helper()
	s, err := cluster.EnsureReplicaSecret(context.Background(), etcd.Client(t), cluster.Keys{Name: "chat"}, keeper(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
