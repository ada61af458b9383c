package app

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// startReplicated creates a cluster of testShards shards with three
// replicas each over the nodes named, starts them and waits until every
// shard's group has a leader record.
func startReplicated(t *testing.T, ids ...string) (*etcdtest.Server, []*testNode) {
	t.Helper()
	return startReplicatedWith(t, ids)
}

// waitLeader waits for shard n's leader record of a term after term.
func waitLeader(t *testing.T, etcd *etcdtest.Server, n int, after uint64) cluster.Leader {
	t.Helper()
	c := etcd.Client(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.Get(context.Background(), cluster.Keys{Name: "chat"}.ShardLeader(n))
		if err == nil && len(resp.Kvs) == 1 {
			if l, err := cluster.ParseLeader(resp.Kvs[0].Value); err == nil && l.Term > after {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader record of shard %d after term %d: %v", n, after, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReplicatedClusterServes: on a cluster created with three replicas
// per shard, every node runs a replica of every shard; writes through
// any node reach the shard's leader and are on every replica's disk;
// reads through any node see them; a replicated shard takes no ownership
// lease; a shard without a majority of its replicas asks to retry.
func TestReplicatedClusterServes(t *testing.T) {
	t.Parallel()
	etcd, nodes := startReplicated(t, "node-a", "node-b", "node-c")
	var ids []string
	for i := range 8 {
		id := fmt.Sprintf("t%02d", i)
		seedThread(t, nodes[i%len(nodes)], id)
		ids = append(ids, id)
	}
	checkThreads(t, nodes, ids)
	for _, n := range nodes {
		code, body := call(t, http.MethodGet, n.url()+"/v1/threads?limit=100", "", nil)
		if code != http.StatusOK || bytes.Count(body, []byte(`"id":"t0`)) != len(ids) {
			t.Fatalf("list through %s: %d %s", n.id, code, body)
		}
	}
	// No ownership lease: cluster status names the leader's node as
	// the owner, with its term as the epoch.
	k := cluster.Keys{Name: "chat"}
	if owners, err := etcd.Client(t).Get(context.Background(), "/chat/shards/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	} else {
		for _, kv := range owners.Kvs {
			if bytes.HasSuffix(kv.Key, []byte("/owner")) {
				t.Errorf("a replicated shard's ownership lease: %s", kv.Key)
			}
		}
	}
	st, err := cluster.ReadStatus(context.Background(), etcd.Client(t), k)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Shards {
		if l := waitLeader(t, etcd, s.N, 0); s.State != cluster.ShardOwned || s.Owner != l.Node || s.Epoch != int64(l.Term) || len(s.Replicas) != 3 {
			t.Errorf("replicated shard %d: %+v, its leader record %+v", s.N, s, l)
		}
	}
	// A subject erasure is the destruction of keys (spec §12): without
	// PROGRESSDB_KEK there are none, and a replicated cluster refuses it
	// as a single node does, recording nothing.
	code, body := call(t, http.MethodPost, nodes[1].url()+"/admin/erasures", `{"author":"u"}`, adminAuth)
	if code != http.StatusConflict || codeOf(body) != "sealing_disabled" {
		t.Fatalf("a subject erasure without sealing: %d %s", code, body)
	}
	if erasures, err := etcd.Client(t).Get(context.Background(), k.Erasures(), clientv3.WithPrefix()); err != nil || len(erasures.Kvs) != 0 {
		t.Fatalf("erasures recorded in etcd: %v, %v", erasures, err)
	}
	// With two of three nodes stopped no shard has a majority: the node
	// left answers 503 shard_unavailable with Retry-After, for reads and
	// writes, once its replicas know they lead no more (a leader without
	// a quorum steps down after an election timeout).
	nodes[1].shutdown()
	nodes[2].shutdown()
	tid := ids[0]
	code = 0
	for deadline := time.Now().Add(30 * time.Second); code != http.StatusServiceUnavailable; {
		var resp *http.Response
		code, body, resp = sendTLS(t, http.DefaultClient, http.MethodGet, nodes[0].url()+"/v1/threads/"+tid+"/messages", "", nil)
		if code == http.StatusServiceUnavailable && (resp.Header.Get("Retry-After") != "1" || codeOf(body) != "shard_unavailable") {
			t.Fatalf("a read without a quorum: %d %v %s", code, resp.Header, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a read without a quorum still answers %d %s", code, body)
		}
	}
	code, body, resp := sendTLS(t, http.DefaultClient, http.MethodPost, nodes[0].url()+"/v1/threads/"+tid+"/messages",
		`{"author":"u","body":{"text":"no quorum"}}`, nil)
	if code != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || codeOf(body) != "shard_unavailable" {
		t.Fatalf("a write without a quorum: %d %v %s", code, resp.Header, body)
	}

	// Every node holds every shard's data once applied: each replica's
	// store, opened after the nodes stopped, has every thread of its
	// shard with its message.
	nodes[0].shutdown()
	for _, n := range nodes {
		opened := map[int]*store.Store{}
		for _, id := range ids {
			shard := cluster.ShardOf(id, testShards)
			if opened[shard] == nil {
				opened[shard] = openShard(t, n, shard)
			}
			if _, err := opened[shard].GetThread(context.Background(), id); err != nil {
				t.Errorf("thread %s not on %s's replica: %v", id, n.id, err)
			}
		}
	}
}

// TestReplicatedStatusAndMetrics: a node of a replicated cluster reports
// its replicas in etcd and serves their metrics. Once every leader hears
// from its followers, cluster status shows each shard led, its replicas
// caught up and none under-replicated; when a node stops, the others
// count every shard under-replicated (each has a replica there) and
// status shows its replicas unknown.
func TestReplicatedStatusAndMetrics(t *testing.T) {
	t.Parallel()
	etcd, nodes := startReplicated(t, "node-a", "node-b", "node-c")
	k := cluster.Keys{Name: "chat"}
	status := func(what string, ok func(cluster.ShardStatus) bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			st, err := cluster.ReadStatus(context.Background(), etcd.Client(t), k)
			if err != nil {
				t.Fatal(err)
			}
			all := true
			for _, s := range st.Shards {
				all = all && ok(s)
			}
			if all {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %+v", what, st.Shards)
			}
		}
	}
	status("every shard led and fully replicated", func(s cluster.ShardStatus) bool {
		leaders := 0
		for _, r := range s.Replicas {
			if r.Role == "leader" {
				leaders++
			}
			if !r.Active || r.Lag != 0 {
				return false
			}
		}
		return leaders == 1 && !s.UnderReplicated
	})
	metrics := func(n *testNode) string {
		code, body := call(t, http.MethodGet, n.url()+"/metrics", "", nil)
		if code != http.StatusOK {
			t.Fatalf("%s's metrics: %d", n.id, code)
		}
		return string(body)
	}
	waitMetric := func(n *testNode, line string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(metrics(n), "\n"+line+"\n"); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never served %q", n.id, line)
			}
		}
	}
	waitMetric(nodes[0], "progressdb_cluster_under_replicated_shards 0")
	for _, want := range []string{`progressdb_replica_leader{shard="0"}`, `progressdb_replica_applied_index{shard="0"}`,
		`progressdb_replica_leader_changes_seen_total{shard="0"}`, "progressdb_replica_proposal_duration_seconds_count"} {
		if !strings.Contains(metrics(nodes[0]), want) {
			t.Errorf("node-a's metrics lack %s", want)
		}
	}
	nodes[2].shutdown()
	status("every shard under-replicated, node-c's replicas unknown", func(s cluster.ShardStatus) bool {
		for _, r := range s.Replicas {
			if r.Node == "node-c" && (r.Role != cluster.RoleUnknown || r.Active) {
				return false
			}
		}
		return s.UnderReplicated
	})
	waitMetric(nodes[0], fmt.Sprintf("progressdb_cluster_under_replicated_shards %d", testShards))
}

// TestReplicatedClusterRestartsAtOnce: every node of a replicated
// cluster stopped, then each started again on its folders (at a new
// address): each replica goes on from the log and state in its store,
// the groups elect leaders of later terms, and every thread written
// before reads back through every node and takes writes again.
func TestReplicatedClusterRestartsAtOnce(t *testing.T) {
	t.Parallel()
	etcd, nodes := startReplicated(t, "node-a", "node-b", "node-c")
	var ids []string
	for i := range testShards {
		id := threadIn(t, i)
		if code, body := call(t, http.MethodPost, nodes[i%len(nodes)].url()+"/v1/threads", fmt.Sprintf(`{"id":%q,"title":"x","author":"u"}`, id), nil); code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", id, code, body)
		}
		ids = append(ids, id)
	}
	terms := make([]uint64, testShards)
	for n := range testShards {
		terms[n] = waitLeader(t, etcd, n, 0).Term
	}
	for _, n := range nodes {
		n.shutdown()
	}
	// Every replica is down before any starts: the first node up runs
	// its replicas without a quorum until the others come.
	restarted := make([]*testNode, len(nodes))
	for i, n := range nodes {
		restarted[i] = startNode(t, etcd, n.id, n.dir)
	}
	for n := range testShards {
		waitLeader(t, etcd, n, terms[n])
	}
	for _, n := range restarted {
		for _, id := range ids {
			if code, body := call(t, http.MethodGet, n.url()+"/v1/threads/"+id, "", nil); code != http.StatusOK {
				t.Fatalf("read %s through %s after the restart: %d %s", id, n.id, code, body)
			}
		}
	}
	for i, id := range ids {
		if code, body := call(t, http.MethodPost, restarted[i%len(restarted)].url()+"/v1/threads/"+id+"/messages",
			`{"author":"u","body":{"text":"after"}}`, nil); code != http.StatusCreated {
			t.Fatalf("append to %s after the restart: %d %s", id, code, body)
		}
	}
}
