package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/replica"
)

// cluster status reads etcd: a node whose process runs is alive with its
// URL and owns its shards with their epochs; a node that never started is
// not alive and its shards are unavailable.
func TestClusterStatus(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	h := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=3")
	if code, _, errOut := h.run("cluster", "status"); code != exitFailed || !strings.Contains(errOut, "cluster create") {
		t.Fatalf("before create: exit %d, %s", code, errOut)
	}
	reportHeld(t, srv, "node-1", "node-2")
	h.mustRun("cluster", "create", "--nodes", "node-1,node-2")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := cluster.StartOwner(ctx, cluster.OwnerOptions{Client: srv.Client(t), Keys: cluster.Keys{Name: "progressdb"},
		Node: "node-1", URL: "http://127.0.0.1:8081", Owner: "node-1/test", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e0, err := w.WaitOwned(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WaitOwned(ctx, 2, 0); err != nil {
		t.Fatal(err)
	}

	var rep clusterStatusReport
	out := h.mustRun("cluster", "status", "--json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if rep.Cluster != "progressdb" || len(rep.Nodes) != 2 || len(rep.Shards) != 3 {
		t.Fatalf("report %+v", rep)
	}
	n1, n2 := rep.Nodes[0], rep.Nodes[1]
	if n1.ID != "node-1" || !n1.Alive || n1.URL != "http://127.0.0.1:8081" || !slices.Equal(n1.Shards, []int{0, 2}) {
		t.Errorf("node-1: %+v", n1)
	}
	if n2.ID != "node-2" || n2.Alive || !slices.Equal(n2.Shards, []int{1}) {
		t.Errorf("node-2: %+v", n2)
	}
	if s := rep.Shards[0]; s.Owner != "node-1" || s.Epoch != e0 || s.State != cluster.ShardOwned {
		t.Errorf("shard 0: %+v, want owned by node-1 at epoch %d", s, e0)
	}
	if s := rep.Shards[1]; s.Home != "node-2" || s.Owner != "" || s.Epoch != 0 || s.State != cluster.ShardUnavailable {
		t.Errorf("shard 1: %+v", s)
	}
	out = h.mustRun("cluster", "status")
	for _, want := range []string{`cluster "progressdb": 3 shards, 2 owned, 1 unavailable`, "node-2  no     -", "1      node-2  -       -      unavailable"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
}

// cluster status reads etcd and nothing else: the built binary answers
// with only the etcd endpoints set (no PROGRESSDB_NODE_ID, ADVERTISE_URL
// or CLUSTER_SECRET, which it refused one at a time before), and an etcd
// that does not answer fails it within statusTimeout with a message
// naming the endpoint (before: clusterTimeout, 15 s, naming nothing to
// check).
func TestClusterStatusNeedsOnlyEtcd(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	h := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=2")
	reportHeld(t, srv, "node-1")
	h.mustRun("cluster", "create", "--nodes", "node-1")
	base := []string{"PATH=" + os.Getenv("PATH"), "PROGRESSDB_LOG_LEVEL=warn"}
	code, out, errOut := runBinary(t, append(base, "PROGRESSDB_CLUSTER_ETCD="+strings.Join(srv.Endpoints(), ",")), "cluster", "status")
	if code != exitOK || !strings.Contains(out, `cluster "progressdb": 2 shards`) {
		t.Fatalf("cluster status with only the etcd endpoints: exit %d\n%s%s", code, out, errOut)
	}

	// A port nothing listens on: taken, then released.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	code, out, errOut = runBinary(t, append(base, "PROGRESSDB_CLUSTER_ETCD="+dead), "cluster", "status")
	want := "etcd at " + dead + " did not answer within " + statusTimeout.String()
	if code != exitFailed || !strings.Contains(errOut, want) || statusTimeout > 5*time.Second {
		t.Fatalf("cluster status on an unreachable etcd: exit %d, want 1 and %q\n%s%s", code, want, out, errOut)
	}
}

// cluster status of a replicated cluster names each shard's leader as its
// owner, with the term as its epoch, and lists the replicas with the
// role and applied index their nodes report and the lag the leader
// reports; a replica whose node is down is unknown and inactive, and its
// shard under-replicated.
func TestClusterStatusReplicas(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	h := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=1")
	nodes := []string{"node-1", "node-2", "node-3"}
	reportHeld(t, srv, nodes...)
	h.mustRun("cluster", "create", "--replicas", "3", "--nodes", strings.Join(nodes, ","))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := cluster.Keys{Name: "progressdb"}
	m, err := cluster.ReadMap(ctx, srv.Client(t), k)
	if err != nil {
		t.Fatal(err)
	}
	id := func(node string) uint64 { r, _ := m.ReplicaOn(0, node); return r.ID }
	// node-1 leads in term 4; node-2 follows; node-3 never started.
	reports := map[string][]replica.GroupStatus{
		"node-1": {{Group: 0, Replica: id("node-1"), Role: replica.RoleLeader, Leader: id("node-1"), Term: 4, Applied: 12,
			Peers: []replica.PeerStatus{{Replica: id("node-1"), Match: 12, Active: true}, {Replica: id("node-2"), Match: 10, Lag: 2, Active: true},
				{Replica: id("node-3"), Lag: 12}}}},
		"node-2": {{Group: 0, Replica: id("node-2"), Role: replica.RoleFollower, Leader: id("node-1"), Term: 4, Applied: 10}},
	}
	for node, groups := range reports {
		o := cluster.OwnerOptions{Client: srv.Client(t), Keys: k, Node: node, URL: "http://" + node, Owner: node + "/test", TTL: 5 * time.Second}
		reg, err := cluster.Register(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = reg.Release() })
		rep, err := cluster.NewProgressReporter(cluster.ProgressOptions{Client: srv.Client(t), Keys: k, Node: node, TTL: 5 * time.Second,
			Every: 20 * time.Millisecond, Statuses: func() []replica.GroupStatus { return groups }})
		if err != nil {
			t.Fatal(err)
		}
		rep.Start(ctx)
		t.Cleanup(rep.Stop)
	}
	pub, err := cluster.NewLeaders(cluster.LeadersOptions{Client: srv.Client(t), Keys: k, Node: "node-1", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pub.Start(ctx)
	t.Cleanup(pub.Stop)
	pub.Lead(0, 4, id("node-1"))

	var rep clusterStatusReport
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out := h.mustRun("cluster", "status", "--json")
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("--json: %v\n%s", err, out)
		}
		// Both nodes' reports, which land in etcd one after the other.
		if s := rep.Shards[0]; s.Owner == "node-1" && len(s.Replicas) == 3 &&
			s.Replicas[0].Role == replica.RoleLeader && s.Replicas[1].Role == replica.RoleFollower {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reports never showed: %+v", rep.Shards)
		}
	}
	s := rep.Shards[0]
	want := []cluster.ReplicaStatus{
		{ID: id("node-1"), Node: "node-1", Role: replica.RoleLeader, Applied: 12, Active: true},
		{ID: id("node-2"), Node: "node-2", Role: replica.RoleFollower, Applied: 10, Lag: 2, Active: true},
		{ID: id("node-3"), Node: "node-3", Role: cluster.RoleUnknown, Lag: 12},
	}
	if s.Epoch != 4 || s.State != cluster.ShardOwned || !s.UnderReplicated || !slices.Equal(s.Replicas, want) {
		t.Fatalf("shard 0: %+v", s)
	}
	out := h.mustRun("cluster", "status")
	var rows []string
	for _, line := range strings.Split(out, "\n") {
		rows = append(rows, strings.Join(strings.Fields(line), " "))
	}
	for _, line := range []string{
		`cluster "progressdb": 1 shards, 1 owned, 0 unavailable, 1 under-replicated`,
		"0 node-1 node-1 4 owned",
		fmt.Sprintf("0 %d node-1 leader 12 0 yes", id("node-1")),
		fmt.Sprintf("0 %d node-2 follower 10 2 yes", id("node-2")),
		fmt.Sprintf("0 %d node-3 unknown - 12 no", id("node-3")),
		"0 - - under-replicated",
	} {
		if !slices.Contains(rows, line) {
			t.Errorf("text output lacks %q:\n%s", line, out)
		}
	}
}
