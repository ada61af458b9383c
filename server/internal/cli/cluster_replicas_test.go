package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
)

// cluster set-replicas changes every shard's replica count over the
// running nodes: refused for a count that is not 1, 3 or 5 and for more
// replicas than running nodes; 3 to 5 adds replicas with new IDs, 5 to 3
// marks the last two of each set leaving, and another change while they
// leave is refused.
func TestClusterSetReplicas(t *testing.T) {
	srv := etcdtest.Start(t)
	h := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=2")
	reportHeld(t, srv, "node-1", "node-2", "node-3")
	h.mustRun("cluster", "create", "--replicas", "3", "--nodes", "node-1,node-2,node-3")
	k := cluster.Keys{Name: "progressdb"}
	running := func(ids ...string) {
		for _, id := range ids {
			if _, err := srv.Client(t).Put(context.Background(), k.Node(id), `{"url":"http://`+id+`"}`); err != nil {
				t.Fatal(err)
			}
		}
	}
	running("node-1", "node-2", "node-3")
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"two"}, exitUsage, "usage"},
		{[]string{"2"}, exitFailed, "1, 3 or 5"},
		{[]string{"5"}, exitFailed, "5 replicas need as many nodes"},
	} {
		if code, _, errOut := h.run(append([]string{"cluster", "set-replicas"}, tc.args...)...); code != tc.code || !strings.Contains(errOut, tc.says) {
			t.Errorf("%v: exit %d, %s", tc.args, code, errOut)
		}
	}
	running("node-4", "node-5")
	var sets [][]cluster.Replica
	if err := json.Unmarshal([]byte(h.mustRun("cluster", "set-replicas", "5", "--json")), &sets); err != nil {
		t.Fatal(err)
	}
	ids := map[uint64]bool{}
	for n, set := range sets {
		if len(set) != 5 || !set[3].Added || !set[4].Added {
			t.Fatalf("shard %d: %+v", n, set)
		}
		for _, r := range set {
			if ids[r.ID] {
				t.Fatalf("replica ID %d twice: %+v", r.ID, sets)
			}
			ids[r.ID] = true
		}
	}
	if out := h.mustRun("cluster", "set-replicas", "3"); strings.Count(out, "(leaving)") != 4 || !strings.Contains(out, "replicas: 3 per shard") {
		t.Fatalf("5 to 3:\n%s", out)
	}
	if code, _, errOut := h.run("cluster", "set-replicas", "1"); code != exitFailed || !strings.Contains(errOut, "under way") {
		t.Errorf("1 while replicas leave: exit %d, %s", code, errOut)
	}
}

// On a cluster of one replica per shard, set-replicas 3 records the count
// and leaves each shard owned by its home, which makes it a group (no set
// yet, no replica ID taken); set-replicas 1 before any home did so puts
// the map back as it was.
func TestClusterSetReplicasFromOne(t *testing.T) {
	srv := etcdtest.Start(t)
	h := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=2")
	reportHeld(t, srv, "node-1", "node-2", "node-3")
	h.mustRun("cluster", "create", "--nodes", "node-1,node-2,node-3")
	k := cluster.Keys{Name: "progressdb"}
	for _, id := range []string{"node-1", "node-2"} {
		if _, err := srv.Client(t).Put(context.Background(), k.Node(id), `{"url":"http://`+id+`"}`); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, errOut := h.run("cluster", "set-replicas", "3"); code != exitFailed || !strings.Contains(errOut, "3 replicas need as many nodes") {
		t.Fatalf("3 over two running nodes: exit %d, %s", code, errOut)
	}
	if _, err := srv.Client(t).Put(context.Background(), k.Node("node-3"), `{"url":"http://node-3"}`); err != nil {
		t.Fatal(err)
	}
	out := h.mustRun("cluster", "set-replicas", "3")
	if !strings.Contains(out, "replicas: 3 per shard") || strings.Count(out, "owned by its home, which makes it a group") != 2 ||
		!strings.Contains(out, "shard 1: node-2 (") {
		t.Fatalf("1 to 3:\n%s", out)
	}
	m, err := cluster.ReadMap(context.Background(), srv.Client(t), k)
	if err != nil || m.ReplicaCount() != 3 || !m.Growing(0) || !m.Growing(1) || m.Grouped(0) {
		t.Fatalf("map after 1 to 3: %+v %v", m, err)
	}
	if ids, err := srv.Client(t).Get(context.Background(), k.ReplicaIDs()); err != nil || len(ids.Kvs) != 0 {
		t.Fatalf("replica IDs taken before any home switched: %v %v", ids, err)
	}
	out = h.mustRun("cluster", "set-replicas", "1")
	if !strings.Contains(out, "replicas: 1 per shard") || strings.Count(out, "owned by its home)") != 2 {
		t.Fatalf("3 back to 1:\n%s", out)
	}
	if m, err := cluster.ReadMap(context.Background(), srv.Client(t), k); err != nil || m.Replicated() || m.Sets != nil {
		t.Fatalf("map after 3 back to 1: %+v %v", m, err)
	}
}
