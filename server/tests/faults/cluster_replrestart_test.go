package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
)

// TestFaultReplicatedAllKilled runs three node processes created with
// three replicas per shard and kills all three with SIGKILL at once
// while a writer per node appends to a thread of its own shard. The
// nodes start again on their folders: every shard publishes a leader of
// a later term, the writers are acknowledged again, every replica of
// every shard applies as far as the others, and every acknowledged
// write is there exactly once through every node and, once the nodes
// stop, in every node's folder of its shard; no write is there twice.
// `make faults` kills the whole cluster FAULT_TRIALS times.
func TestFaultReplicatedAllKilled(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	direct := etcd.DirectClient(t)
	envs := clusterEnvs(t, strings.Join(etcd.Endpoints(), ","))
	nodes := startReplicatedNodes(t, envs, direct)
	written := make([]map[string][]ack, clusterShards)
	for n := range written {
		written[n] = map[string][]ack{}
	}
	for trial := range pick(1, suite.trials) {
		for tid, as := range restartAllUnderLoad(t, trial, nodes, envs, direct) {
			written[cluster.ShardOf(tid, clusterShards)][tid] = as
		}
	}
	for _, n := range nodes {
		if code := n.stop(t); code != 0 {
			t.Fatalf("node exit status %d after SIGTERM\n%s", code, n.output())
		}
	}
	for n := range clusterShards {
		checkFolders(t, envs, n, written[n])
	}
}

// restartAllUnderLoad writes through every node, one thread of shard i
// through node i, kills every node, starts them again on the same
// folders and addresses, and checks what the cluster holds afterwards.
// It returns each thread's acknowledged writes.
func restartAllUnderLoad(t *testing.T, trial int, nodes []*server, envs map[string]envVars, direct *clientv3.Client) map[string][]ack {
	t.Helper()
	before := make([]cluster.Leader, clusterShards)
	for n := range clusterShards {
		before[n] = waitLeaderRecord(t, direct, n, func(cluster.Leader) bool { return true })
	}
	tids := make([]string, len(nodes))
	for i := range nodes {
		tids[i] = threadInShard(i%clusterShards, 100+trial)
	}
	// The writers keep the same URLs across the restart: a node comes
	// back on its address.
	ld := startLoad(t, fmt.Sprintf("t%d", trial), nodes, tids)
	ld.waitAcked(t, 15, time.Time{}, "writes acknowledged through every node before the kill")
	for _, s := range nodes {
		s.kill()
	}
	// Every process is gone: a write sent from now on is answered by the
	// restarted nodes or not at all.
	killed := time.Now()
	for i, id := range clusterIDs {
		nodes[i] = launchClusterNode(t, envs[id], nodes[i].addr())
	}
	for _, s := range nodes {
		waitNodeUp(t, s)
	}
	var leaders []string
	for n := range clusterShards {
		l := waitLeaderRecord(t, direct, n, func(l cluster.Leader) bool { return l.Term > before[n].Term })
		leaders = append(leaders, fmt.Sprintf("shard %d: %s in term %d (was %d)", n, l.Node, l.Term, before[n].Term))
	}
	elected := time.Since(killed)
	ld.waitAcked(t, 15, killed, "writes acknowledged through every node after the restart")
	written := ld.end()
	_, first := ld.since(killed)
	total, failed := ld.counts()
	t.Logf("trial %d: every node killed; leaders published %s after the kill (%s); the first write sent after the kill acknowledged %s after it; %d writes acknowledged, %d refused or failed",
		trial, elected.Round(time.Millisecond), strings.Join(leaders, "; "), first.Sub(killed).Round(time.Millisecond), total, failed)

	for tid, as := range written {
		checkOnce(t, nodes, tid, as)
	}
	waitFor(t, time.Minute, "every replica of every shard to apply as far as the others", func() bool {
		for n := range clusterShards {
			if !sameApplied(nodes, n) {
				return false
			}
		}
		return true
	})
	return written
}

// sameApplied reports whether every node has applied shard n's log as
// far as the others.
func sameApplied(nodes []*server, n int) bool {
	var idx []int64
	for _, s := range nodes {
		idx = append(idx, appliedIndex(s, n))
	}
	return idx[0] > 0 && idx[0] == idx[1] && idx[1] == idx[2]
}
