package faults

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
)

// Replicas that lose their node or their folder, and moves, with real
// node processes on a real etcd (spec §15, docs/replication-design.md §8).

// fourIDs are the nodes of the four-node replicated clusters: one node
// more than the replica count, so that a lost node's replicas have
// somewhere to go.
var fourIDs = []string{"node-1", "node-2", "node-3", "node-4"}

// fourEnvs are clusterEnvs with a fourth node.
func fourEnvs(t testing.TB, endpoints string, extra ...string) map[string]envVars {
	t.Helper()
	envs := clusterEnvs(t, endpoints, extra...)
	envs["node-4"] = clusterNodeEnv(t, endpoints, "node-4", t.TempDir()).with(extra...)
	return envs
}

// gauge reads an unlabelled gauge from node s's /metrics; -1 when it
// does not answer or serves none.
func gauge(s *server, name string) float64 {
	resp, err := httpClient.Get(s.url + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// shardMap reads the cluster's shard map.
func shardMap(t testing.TB, direct *clientv3.Client) cluster.Map {
	t.Helper()
	m, err := cluster.ReadMap(context.Background(), direct, cluster.Keys{Name: "progressdb"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// settled reports why the cluster is not back to three healthy replicas
// of every shard on the nodes of byID ("" when it is): every set of
// three replicas, none leaving, each on a node of byID, every node's
// progressdb_cluster_under_replicated_shards 0, and, when same, every
// replica of each shard applied as far as the others (with no writes
// going on).
func settled(m cluster.Map, byID map[string]*server, same bool) string {
	for n, set := range m.Sets {
		if len(set) != 3 || len(m.Desired(n)) != 3 {
			return fmt.Sprintf("shard %d's set %+v", n, set)
		}
		var applied []int64
		for _, r := range set {
			s, ok := byID[r.Node]
			if !ok {
				return fmt.Sprintf("shard %d's set %+v names a node gone", n, set)
			}
			applied = append(applied, appliedIndex(s, n))
		}
		if slices.Min(applied) <= 0 || same && slices.Min(applied) != slices.Max(applied) {
			return fmt.Sprintf("shard %d's replicas applied %v", n, applied)
		}
	}
	for id, s := range byID {
		if g := gauge(s, "progressdb_cluster_under_replicated_shards"); g != 0 {
			return fmt.Sprintf("%s's progressdb_cluster_under_replicated_shards %v", id, g)
		}
	}
	return ""
}

// waitSettled waits until settled finds nothing, and returns the map.
func waitSettled(t testing.TB, direct *clientv3.Client, byID map[string]*server, same bool, what string) cluster.Map {
	t.Helper()
	var m cluster.Map
	why := ""
	deadline := time.Now().Add(2 * time.Minute)
	for {
		m = shardMap(t, direct)
		if why = settled(m, byID, same); why == "" {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 2m for %s; last seen: %s", what, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFaultReplicatedNodeLostForGood runs four node processes created
// with three replicas per shard and a two-second
// PROGRESSDB_CLUSTER_DEAD_AFTER, with a writer through each of three
// nodes. The fourth, which holds a replica of every shard, is killed
// with SIGKILL and never started again: once its registration expired
// and it stayed dead past DEAD_AFTER, each of its replicas is re-created
// on the node holding none of that shard (added as a learner, caught up
// by a snapshot, promoted, the dead one removed), every shard is back
// to three healthy replicas on the nodes left and every node's
// progressdb_cluster_under_replicated_shards is 0. The writers go on
// being acknowledged; every acknowledged write is there exactly once
// through every node left and, once they stop, in every folder of the
// shard's new set.
func TestFaultReplicatedNodeLostForGood(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	direct := etcd.DirectClient(t)
	envs := fourEnvs(t, strings.Join(etcd.Endpoints(), ","), "PROGRESSDB_CLUSTER_DEAD_AFTER", "2s")
	nodes := startReplicatedOn(t, fourIDs, envs, direct)
	// Shard n's replicas are on nodes n, n+1 and n+2: node-3 holds one
	// of every shard, and each shard has one node free of it.
	const lost = 2
	live := slices.Delete(slices.Clone(nodes), lost, lost+1)
	ld := startLoad(t, "lost", live, []string{threadInShard(0, 1), threadInShard(1, 1), threadInShard(2, 1)})
	ld.waitAcked(t, 15, time.Time{}, "writes acknowledged before the kill")
	killed := time.Now()
	nodes[lost].kill()

	byID := map[string]*server{}
	for i, s := range nodes {
		if i != lost {
			byID[fourIDs[i]] = s
		}
	}
	m := waitSettled(t, direct, byID, false, "node-3's replicas re-created on the nodes left")
	recreated := time.Since(killed)
	ld.waitAcked(t, 15, time.Now(), "writes acknowledged once every shard is whole again")
	written := ld.end()
	waitSettled(t, direct, byID, true, "every replica of every shard to apply as far as the others")
	acked, refused := ld.counts()
	t.Logf("node-3 killed for good; every shard back to three healthy replicas %s after the kill; %d writes acknowledged, %d refused or failed",
		recreated.Round(time.Millisecond), acked, refused)
	for tid, as := range written {
		checkOnce(t, live, tid, as)
	}
	for _, s := range live {
		if code := s.stop(t); code != 0 {
			t.Fatalf("node exit status %d after SIGTERM\n%s", code, s.output())
		}
	}
	for n := range clusterShards {
		for _, r := range m.Sets[n] {
			if r.Node == fourIDs[lost] {
				t.Fatalf("shard %d's set still names the lost node: %+v", n, m.Sets[n])
			}
		}
		shardWrites := map[string][]ack{}
		for tid, as := range written {
			if cluster.ShardOf(tid, clusterShards) == n {
				shardWrites[tid] = as
			}
		}
		var ids []string
		for _, r := range m.Sets[n] {
			ids = append(ids, r.Node)
		}
		checkFoldersOf(t, envs, ids, n, shardWrites)
	}
}

// TestFaultReplicatedFolderLost runs three node processes created with
// three replicas per shard, with a writer through each of two nodes. The
// third is killed with SIGKILL, its data folder deleted, and it is
// started again on its address with an empty one. Its replicas had
// started (they may have voted and acknowledged writes), so none runs
// again under its old ID: each is replaced in its set by a replica of a
// new ID on the same node, caught up by a snapshot through the nodes'
// listener, promoted, and the old ID removed. Every shard is back to
// three healthy replicas, every replica applies as far as the others,
// the writers go on being acknowledged, and every acknowledged write is
// there exactly once through every node and, once they stop, in every
// node's folder. `make faults` loses each node's folder in turn,
// FAULT_TRIALS times.
func TestFaultReplicatedFolderLost(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	direct := etcd.DirectClient(t)
	envs := clusterEnvs(t, strings.Join(etcd.Endpoints(), ","))
	nodes := startReplicatedNodes(t, envs, direct)
	byID := map[string]*server{}
	written := make([]map[string][]ack, clusterShards)
	for n := range written {
		written[n] = map[string][]ack{}
	}
	for trial := range pick(1, suite.trials) {
		lost := (2 + trial) % len(nodes)
		id := clusterIDs[lost]
		live := slices.Delete(slices.Clone(nodes), lost, lost+1)
		before := shardMap(t, direct)
		ld := startLoad(t, fmt.Sprintf("t%d", trial), []*server{live[0], live[1], live[0]},
			[]string{threadInShard(0, 10+trial), threadInShard(1, 10+trial), threadInShard(2, 10+trial)})
		ld.waitAcked(t, 15, time.Time{}, "writes acknowledged before the kill")
		nodes[lost].kill()
		if err := os.RemoveAll(envs[id]["PROGRESSDB_DB_PATH"]); err != nil {
			t.Fatal(err)
		}
		restarted := time.Now()
		nodes[lost] = startClusterNodeAt(t, envs[id], nodes[lost].addr())
		for i, s := range nodes {
			byID[clusterIDs[i]] = s
		}
		m := waitSettled(t, direct, byID, false, id+"'s replicas back under new IDs")
		for n := range clusterShards {
			old, _ := before.ReplicaOn(n, id)
			now, _ := m.ReplicaOn(n, id)
			if now.ID == old.ID {
				t.Fatalf("shard %d: %s's replica runs again under its old ID %d after its folder was lost: %+v", n, id, old.ID, m.Sets[n])
			}
		}
		if out := nodes[lost].output(); strings.Count(out, "replica_folder_lost") < clusterShards {
			t.Fatalf("%s did not log replica_folder_lost for each shard:\n%s", id, out)
		}
		back := time.Since(restarted)
		ld.waitAcked(t, 15, time.Now(), "writes acknowledged once every shard is whole again")
		for tid, as := range ld.end() {
			checkOnce(t, nodes, tid, as)
			written[cluster.ShardOf(tid, clusterShards)][tid] = as
		}
		waitSettled(t, direct, byID, true, "every replica of every shard to apply as far as the others")
		acked, refused := ld.counts()
		t.Logf("trial %d: %s's folder lost; every shard whole again, its replicas under new IDs, %s after its restart; %d writes acknowledged, %d refused or failed",
			trial, id, back.Round(time.Millisecond), acked, refused)
	}
	for _, s := range nodes {
		if code := s.stop(t); code != 0 {
			t.Fatalf("node exit status %d after SIGTERM\n%s", code, s.output())
		}
	}
	for n := range clusterShards {
		checkFolders(t, envs, n, written[n])
	}
}

// TestFaultReplicatedMoveUnderLoad runs four node processes created with
// three replicas per shard, with a writer through every node on threads
// of shard 0. `progressdb cluster move-shard 0 --to NODE` moves shard
// 0's home replica to the node holding none of it while the writes go
// on: the command exits 0 once the old replica left the set, the new set
// holds NODE and not the old home, whose folder of the shard is
// deleted, and the writers go on being acknowledged. Every acknowledged
// write is there exactly once through every node and, once they stop,
// in every folder of the new set; no write is there twice. `make
// faults` moves the shard FAULT_TRIALS times in a row.
func TestFaultReplicatedMoveUnderLoad(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	direct := etcd.DirectClient(t)
	envs := fourEnvs(t, strings.Join(etcd.Endpoints(), ","))
	nodes := startReplicatedOn(t, fourIDs, envs, direct)
	byID := map[string]*server{}
	for i, s := range nodes {
		byID[fourIDs[i]] = s
	}
	var tids []string
	for i := range nodes {
		tids = append(tids, threadInShard(0, 20+i))
	}
	ld := startLoad(t, "move", nodes, tids)
	ld.waitAcked(t, 15, time.Time{}, "writes acknowledged before the move")
	var m cluster.Map
	for trial := range pick(1, suite.trials) {
		m = shardMap(t, direct)
		from := m.Homes[0]
		to := ""
		for _, id := range fourIDs {
			if _, ok := m.ReplicaOn(0, id); !ok {
				to = id
			}
		}
		start := time.Now()
		via := byID[m.Sets[0][1].Node]
		if p := runCLI(t, via.cliEnv(envs[from]), "cluster", "move-shard", "0", "--to", to); p.code != 0 {
			t.Fatalf("trial %d: cluster move-shard 0 --to %s: %d\n%s", trial, to, p.code, p.output())
		}
		took := time.Since(start)
		m = shardMap(t, direct)
		if _, ok := m.ReplicaOn(0, from); ok || len(m.Sets[0]) != 3 {
			t.Fatalf("trial %d: shard 0's set after its move from %s: %+v", trial, from, m.Sets[0])
		}
		if r, ok := m.ReplicaOn(0, to); !ok || r.Leaving {
			t.Fatalf("trial %d: shard 0's set after its move to %s: %+v", trial, to, m.Sets[0])
		}
		waitFor(t, time.Minute, from+" to delete its folder of shard 0", func() bool {
			_, err := os.Stat(cluster.ShardDBPath(envs[from]["PROGRESSDB_DB_PATH"], 0))
			return os.IsNotExist(err)
		})
		ld.waitAcked(t, 15, time.Now(), "writes acknowledged after the move")
		t.Logf("trial %d: shard 0's replica moved from %s to %s under load in %s", trial, from, to, took.Round(time.Millisecond))
	}
	written := ld.end()
	m = waitSettled(t, direct, byID, true, "every shard whole after the moves")
	acked, refused := ld.counts()
	t.Logf("%d writes acknowledged, %d refused or failed", acked, refused)
	for tid, as := range written {
		checkOnce(t, nodes, tid, as)
	}
	for _, s := range nodes {
		if code := s.stop(t); code != 0 {
			t.Fatalf("node exit status %d after SIGTERM\n%s", code, s.output())
		}
	}
	var ids []string
	for _, r := range m.Sets[0] {
		ids = append(ids, r.Node)
	}
	checkFoldersOf(t, envs, ids, 0, written)
}
