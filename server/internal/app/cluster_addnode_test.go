package app

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestClusterNodeWithoutShards: a node started after the cluster was
// created, under a new ID, holds no shard and answers every request by
// forwarding it (docs/cluster.md, adding a node).
func TestClusterNodeWithoutShards(t *testing.T) {
	t.Parallel()
	etcd, nodes := startCluster(t, "node-a", "node-b")
	extra := startNode(t, etcd, "node-c", t.TempDir())
	for i := range 4 {
		id := fmt.Sprintf("added-%d", i)
		if code, body := call(t, http.MethodPost, extra.url()+"/v1/threads", fmt.Sprintf(`{"id":%q,"title":"x","author":"u"}`, id), nil); code != http.StatusCreated {
			t.Fatalf("create %s through the added node: %d %s", id, code, body)
		}
		for _, n := range append(nodes, extra) {
			if code, body := call(t, http.MethodGet, n.url()+"/v1/threads/"+id, "", nil); code != http.StatusOK || !bytes.Contains(body, []byte(id)) {
				t.Fatalf("read %s through %s: %d %s", id, n.id, code, body)
			}
		}
	}
	st := waitOwned(t, etcd, testShards)
	for _, n := range st.Nodes {
		if n.ID == "node-c" && (!n.Alive || len(n.Shards) != 0) {
			t.Fatalf("added node in the status: %+v", n)
		}
	}
}

// TestClusterShardsUnownedMetric: once a node stops, the other nodes
// report its shards as unowned (the basis of the alert
// ProgressDBClusterShardWithoutOwner, since the stopped node reports
// nothing), and report none once it is back.
func TestClusterShardsUnownedMetric(t *testing.T) {
	t.Parallel()
	etcd, nodes := startCluster(t, "node-a", "node-b")
	a, b := nodes[0], nodes[1]
	unowned := func() string {
		_, body := call(t, http.MethodGet, a.url()+"/metrics", "", nil)
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, "progressdb_cluster_shards_unowned "); ok {
				return v
			}
		}
		t.Fatalf("no progressdb_cluster_shards_unowned in node-a's metrics")
		return ""
	}
	// node-a's view of the owners follows an etcd watch: it may start a
	// moment behind node-b taking its shards.
	waitFor(t, func() bool { return unowned() == "0" }, "node-a to report every shard owned")
	b.shutdown()
	want := fmt.Sprint(testShards / 2) // node-b's home shards
	waitFor(t, func() bool { return unowned() == want }, "node-a to report node-b's shards unowned")
	startNode(t, etcd, "node-b", b.dir)
	waitFor(t, func() bool { return unowned() == "0" }, "node-a to report every shard owned again")
}

// waitFor polls cond; the bound only keeps a broken build from hanging.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}
