package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/keystore"
)

// bystander writes beside sealAuthor in TestSetReplicasGrowsASealedCluster.
const bystander = "bystander-Xq9"

// TestSetReplicasGrowsASealedCluster: a sealed cluster of three nodes
// created with one replica per shard, sealed threads written through
// every node in every shard, grows to three replicas (set-replicas 3):
// each home keeps its key store's author index, the other replicas
// receive it with their first snapshot, and every sealed message reads
// back through every node. After the leader's node of a shard stops,
// the next leaders find the author's keys: an append by the author
// reuses the author's key of each thread, and a subject erasure of the
// author destroys one key per thread and leaves none of the author's
// messages, the bystander's all. Every replica's key store then holds
// the bystander's key of each of its threads and none of the author's,
// and no thread's counter went past the two keys it made.
func TestSetReplicasGrowsASealedCluster(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	c := etcd.Client(t)
	k := cluster.Keys{Name: "chat"}
	ids := []string{"node-a", "node-b", "node-c"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.CreateCluster(ctx, c, k, testShards, ids); err != nil {
		t.Fatal(err)
	}
	var nodes []*testNode
	for _, id := range ids {
		nodes = append(nodes, startSealedNode(t, etcd, id, t.TempDir()))
	}
	waitOwned(t, etcd, testShards)
	var threads []string
	for n := range testShards {
		tid := threadIn(t, n)
		sealedThread(t, nodes[n%len(nodes)], tid)
		appendBy(t, nodes[(n+1)%len(nodes)], tid, bystander)
		threads = append(threads, tid)
	}

	setReplicas(t, c, k, 3)
	m := waitSets(t, c, k, 3)
	for _, n := range nodes {
		for _, tid := range threads {
			readSealed(t, n, tid)
		}
	}

	shard := cluster.ShardOf(threads[0], testShards)
	old := waitLeader(t, etcd, shard, 0)
	var stopped *testNode
	var live []*testNode
	for _, n := range nodes {
		if n.id == old.Node {
			stopped = n
			n.shutdown()
		} else {
			live = append(live, n)
		}
	}
	next := waitLeader(t, etcd, shard, old.Term)
	t.Logf("shard %d: leader %s (term %d), then %s (term %d)", shard, old.Node, old.Term, next.Node, next.Term)
	for i, tid := range threads {
		appendBy(t, live[i%len(live)], tid, sealAuthor)
		readSealed(t, live[(i+1)%len(live)], tid)
	}

	code, body := retryCall(t, http.MethodPost, live[0].url()+"/admin/erasures", fmt.Sprintf(`{"author":%q}`, sealAuthor), adminAuth)
	var acc retention.ErasureAccepted
	if code != http.StatusAccepted || json.Unmarshal(body, &acc) != nil {
		t.Fatalf("erasure request: %d %s", code, body)
	}
	st := waitErasure(t, live[1].url(), acc.ErasureID)
	if st.Status != retention.ErasureCompleted || st.KeysDestroyed != int64(len(threads)) {
		t.Fatalf("erasure: %+v, want completed with one key destroyed per thread (%d)", st, len(threads))
	}
	for _, n := range live {
		for _, tid := range threads {
			code, body := call(t, http.MethodGet, n.url()+"/v1/threads/"+tid+"/messages", "", nil)
			if code != http.StatusOK || strings.Contains(string(body), sealAuthor) || strings.Contains(string(body), sealBody) ||
				!strings.Contains(string(body), bystander) {
				t.Fatalf("%s through %s after the erasure: %d %s", tid, n.id, code, body)
			}
		}
	}

	// The stopped node catches up (its trail holds the erasure's runs
	// sealed: their footers come after the keys' destruction in the
	// log), then every replica's key store is read.
	live = append(live, startSealedNode(t, etcd, stopped.id, stopped.dir))
	waitSets(t, c, k, 3)
	waitFor(t, func() bool { return sealedRuns(t, filepath.Join(stopped.dir, "audit"), st.RunIDs) },
		stopped.id+"'s trail to hold the erasure's runs sealed")
	for _, tid := range threads {
		code, body := retryCall(t, http.MethodGet, live[2].url()+"/v1/threads/"+tid+"/messages", "", nil)
		if code != http.StatusOK || strings.Contains(string(body), sealBody) || !strings.Contains(string(body), bystander) {
			t.Fatalf("%s through %s, started again: %d %s", tid, stopped.id, code, body)
		}
	}
	for _, n := range live {
		n.shutdown()
	}
	byID := nodesByID(live)
	secret := replicaSecret(t, etcd)
	for s, tid := range threads {
		for _, r := range m.Sets[s] {
			path := cluster.ShardKeystorePath(filepath.Join(byID[r.Node].dir, "keys"), s)
			checkGrownKeys(t, path, tid, secret, fmt.Sprintf("%s's replica of shard %d", r.Node, s))
		}
	}
}

// sealedRuns reports whether the audit folder root holds a sealed file
// (.jsonl) of every run of runs.
func sealedRuns(t *testing.T, root string, runs []string) bool {
	t.Helper()
	var names []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".jsonl") {
			names = append(names, d.Name())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range runs {
		if !slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, run) }) {
			return false
		}
	}
	return true
}

// appendBy appends a message of author to thread tid through via, as a
// client does: a 503 or a 421 (a leader changing) is tried again.
func appendBy(t *testing.T, via *testNode, tid, author string) {
	t.Helper()
	code, body := retryCall(t, http.MethodPost, via.url()+"/v1/threads/"+tid+"/messages",
		fmt.Sprintf(`{"author":%q,"body":{"text":"%s-%s"}}`, author, author, tid), nil)
	if code != http.StatusCreated {
		t.Fatalf("append of %s to %s through %s: %d %s", author, tid, via.id, code, body)
	}
}

// checkGrownKeys checks a stopped replica's key store of thread tid's
// shard after the erasure: the author has no key left, the bystander
// its one, numbered after the author's, and the thread's counter stands
// after those two (no key was made twice for one author).
func checkGrownKeys(t *testing.T, path, tid string, secret []byte, where string) {
	t.Helper()
	ks, err := keystore.Open(context.Background(), path, keystore.Options{Keeper: keeper(t), GroupSecret: secret, MustExist: true})
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	gone, err := ks.AuthorKeys(context.Background(), sealAuthor)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := ks.AuthorKeys(context.Background(), bystander)
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.Close(); err != nil {
		t.Fatal(err)
	}
	if len(gone) != 0 || len(kept) != 1 || kept[0] != (keystore.KeyRef{Thread: tid, Number: 2}) {
		t.Fatalf("%s: the author's keys %v (want none), the bystander's %v (want key 2 of %s)", where, gone, kept, tid)
	}
	db, err := pebble.Open(path, &pebble.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, closer, err := db.Get([]byte("k:" + tid + ":next"))
	if err != nil {
		t.Fatalf("%s: the counter of %s: %v", where, tid, err)
	}
	defer closer.Close()
	if string(v) != "0000000003" {
		t.Fatalf("%s: the counter of %s stands at %s, want 3", where, tid, v)
	}
}
