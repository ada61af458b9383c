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

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
)

// A node of a four-node cluster with three replicas per shard stops for
// good: once it stayed unregistered for PROGRESSDB_CLUSTER_DEAD_AFTER, each
// of its replicas is re-created on the node that had none of the shard
// (added as a learner, caught up by a snapshot over the node listener,
// promoted, the dead one removed from its group and from the map), every
// shard is back to three healthy replicas, and every thread written before
// reads back through every node left and is on every replica's disk.
func TestDeadNodesReplicasAreRecreated(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	ctx := context.Background()
	c := etcd.Client(t)
	k := cluster.Keys{Name: "chat"}
	ids := []string{"node-a", "node-b", "node-c", "node-d"}
	if _, _, err := cluster.EnsureReplicated(ctx, c, k, testShards, 3, ids); err != nil {
		t.Fatal(err)
	}
	var nodes []*testNode
	for _, id := range ids {
		nodes = append(nodes, startNodeWith(t, etcd, id, t.TempDir(), "PROGRESSDB_CLUSTER_DEAD_AFTER=2s"))
	}
	for n := range testShards {
		waitLeader(t, etcd, n, 0)
	}
	threads := seedShards(t, nodes[:3])

	// A move of shard 0's home replica (node-a: the set is node-a, -b, -c)
	// to node-d, asked of node-b: node-a's folder of it goes, and node-a
	// holds none of the shard until it gets a new replica below.
	code, body := call(t, http.MethodPost, nodes[1].url()+"/admin/cluster/shards/0/move", `{"to":"node-d"}`, adminAuth)
	if code != http.StatusOK || !bytes.Contains(body, []byte(`"removed":true`)) {
		t.Fatalf("move shard 0 to node-d: %d %s", code, body)
	}
	if m, err := cluster.ReadMap(ctx, c, k); err != nil || fmt.Sprint(nodesOf(m.Sets[0])) != "[node-b node-c node-d]" {
		t.Fatalf("shard 0's set after the move: %+v %v", m.Sets, err)
	}
	waitFor(t, func() bool {
		_, err := os.Stat(cluster.ShardDBPath(filepath.Join(nodes[0].dir, "data"), 0))
		return os.IsNotExist(err)
	}, "node-a to delete its folder of shard 0")

	dead := nodes[3]
	dead.shutdown()
	nodes = nodes[:3]
	m := waitMap(t, c, k, "every shard back to three replicas on the nodes left", func(m cluster.Map) string {
		for n := range testShards {
			if _, on := m.ReplicaOn(n, dead.id); on || len(m.Sets[n]) != 3 {
				return fmt.Sprintf("shard %d's set: %+v", n, m.Sets[n])
			}
		}
		return underReplicated(t, ctx, c, k)
	})
	checkThreads(t, nodes, threads)
	// The node view's gauge agrees.
	waitFor(t, func() bool {
		code, body := call(t, http.MethodGet, nodes[0].url()+"/metrics", "", nil)
		return code == http.StatusOK && bytes.Contains(body, []byte("\nprogressdb_cluster_under_replicated_shards 0\n"))
	}, "progressdb_cluster_under_replicated_shards 0")

	// Each replica's disk holds its shard's thread once the nodes stop.
	time.Sleep(200 * time.Millisecond) // the last applies of the followers
	for _, n := range nodes {
		n.shutdown()
	}
	byID := nodesByID(nodes)
	for s, tid := range threads {
		for _, r := range m.Sets[s] {
			if _, err := openShard(t, byID[r.Node], s).GetThread(ctx, tid); err != nil {
				t.Errorf("thread %s not on %s's replica of shard %d: %v", tid, r.Node, s, err)
			}
		}
	}
}

// nodesOf lists the nodes of a replica set, in order.
func nodesOf(set []cluster.Replica) []string {
	var out []string
	for _, r := range set {
		out = append(out, r.Node)
	}
	return out
}

// A node of a three-node cluster with three replicas per shard loses its
// data folder while it is stopped and starts again on an empty one. Its
// replicas had started, so none of them runs again under its old ID (it
// may have voted and acknowledged entries it no longer has): each is
// replaced in its set by a replica with a new ID on the same node, which
// the shard's leader adds as a learner, catches up by snapshot and
// promotes, and the old ID is removed from the group and the set. Every
// shard is back to three healthy replicas, every thread reads back
// through every node, and the node's folders record the new IDs.
func TestLostFolderComesBackUnderANewID(t *testing.T) {
	t.Parallel()
	etcd, nodes := startReplicated(t, "node-a", "node-b", "node-c")
	ctx := context.Background()
	c := etcd.Client(t)
	k := cluster.Keys{Name: "chat"}
	threads := seedShards(t, nodes[:2])
	before, err := cluster.ReadMap(ctx, c, k)
	if err != nil {
		t.Fatal(err)
	}
	lost := nodes[2]
	lost.shutdown()
	if err := os.RemoveAll(filepath.Join(lost.dir, "data")); err != nil {
		t.Fatal(err)
	}
	nodes[2] = startNode(t, etcd, lost.id, lost.dir)

	m := waitMap(t, c, k, "every shard back to three healthy replicas, the lost ones under new IDs", func(m cluster.Map) string {
		for n := range testShards {
			old, _ := before.ReplicaOn(n, lost.id)
			now, _ := m.ReplicaOn(n, lost.id)
			if len(m.Sets[n]) != 3 || now.ID == old.ID {
				return fmt.Sprintf("shard %d's set: %+v", n, m.Sets[n])
			}
		}
		return underReplicated(t, ctx, c, k)
	})
	checkThreads(t, nodes, threads)
	for n := range testShards {
		old, _ := before.ReplicaOn(n, lost.id)
		if resp, err := c.Get(ctx, k.ReplicaStarted(old.ID)); err != nil || len(resp.Kvs) != 0 {
			t.Errorf("replica %d's start mark after it left: %v %v", old.ID, resp, err)
		}
	}

	time.Sleep(200 * time.Millisecond) // the last applies of the followers
	for _, n := range nodes {
		n.shutdown()
	}
	for n, tid := range threads {
		st := openShard(t, nodes[2], n)
		log, err := st.RaftLog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if now, _ := m.ReplicaOn(n, lost.id); log.Replica() != now.ID {
			t.Errorf("%s's folder of shard %d records replica %d, the set names %d", lost.id, n, log.Replica(), now.ID)
		}
		if _, err := st.GetThread(ctx, tid); err != nil {
			t.Errorf("thread %s not on %s's new replica of shard %d: %v", tid, lost.id, n, err)
		}
	}
}

// A move whose target node dies before its new replica caught up is
// cancelled once the node stayed dead past PROGRESSDB_CLUSTER_DEAD_AFTER:
// shard 0's home replica is moved to node-d, registered but never
// answering (a node that died as the move began), and node-d's
// registration then ends. The shard's leader removes node-d's learner
// and the set goes back to the replicas it had, none leaving, the home's
// kept; the shard is whole and its thread reads back through every node.
func TestMoveToADeadNodeIsCancelled(t *testing.T) {
	t.Parallel()
	etcd, nodes := startReplicatedWith(t, []string{"node-a", "node-b", "node-c"}, "PROGRESSDB_CLUSTER_DEAD_AFTER=2s")
	ctx := context.Background()
	c := etcd.Client(t)
	k := cluster.Keys{Name: "chat"}
	tid := threadIn(t, 0)
	seedThread(t, nodes[1], tid)
	before, err := cluster.ReadMap(ctx, c, k)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := cluster.Register(ctx, cluster.OwnerOptions{Client: c, Keys: k, Node: "node-d", URL: "http://127.0.0.1:1",
		Owner: "node-d/1", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	moved, err := cluster.MoveReplica(ctx, c, k, 0, before.Homes[0], "node-d")
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Release(); err != nil {
		t.Fatal(err)
	}
	m := waitMap(t, c, k, "the move to node-d cancelled", func(m cluster.Map) string {
		if fmt.Sprint(m.Sets[0]) != fmt.Sprint(before.Sets[0]) {
			return fmt.Sprintf("shard 0's set %+v (%+v after the move), was %+v", m.Sets[0], moved.Sets[0], before.Sets[0])
		}
		return ""
	})
	if m.Homes[0] != before.Homes[0] {
		t.Fatalf("shard 0's home after the cancel: %s, was %s", m.Homes[0], before.Homes[0])
	}
	waitFor(t, func() bool {
		st, err := cluster.ReadStatus(ctx, c, k)
		return err == nil && !st.Shards[0].UnderReplicated
	}, "shard 0 whole again")
	checkThreads(t, nodes, []string{tid})
}

// underReplicated describes a shard the cluster's status shows
// under-replicated, "" when none is.
func underReplicated(t *testing.T, ctx context.Context, c *clientv3.Client, k cluster.Keys) string {
	t.Helper()
	st, err := cluster.ReadStatus(ctx, c, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Shards {
		if s.UnderReplicated {
			return fmt.Sprintf("shard %d under-replicated: %+v", s.N, s.Replicas)
		}
	}
	return ""
}

// nodesByID indexes nodes by their node ID.
func nodesByID(nodes []*testNode) map[string]*testNode {
	byID := map[string]*testNode{}
	for _, n := range nodes {
		byID[n.id] = n
	}
	return byID
}
