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
// running nodes: refused for a count that is not 3 or 5 and for more
// replicas than running nodes; 3 to 5 adds replicas with new IDs, 5 to 3
// marks the last two of each set leaving.
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
		{[]string{"1"}, exitFailed, "one replica"},
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
}
