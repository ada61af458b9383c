package app

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/router"
)

// TestClusterPauseIsClusterWide: PUT /admin/retention/pause on one node
// pauses every shard of the cluster, those of other nodes included: their
// status says so and their runs are refused as paused; resumed through
// another node, every shard runs again.
func TestClusterPauseIsClusterWide(t *testing.T) {
	t.Parallel()
	_, nodes := startCluster(t, "node-a", "node-b")
	a, b := nodes[0], nodes[1]

	code, body := call(t, http.MethodPut, a.url()+"/admin/retention/pause", `{"paused":true,"reason":"incident 7"}`, adminAuth)
	var st retention.PauseState
	if code != http.StatusOK || json.Unmarshal(body, &st) != nil || !st.Paused || st.Reason != "incident 7" {
		t.Fatalf("pause through %s: %d %s", a.id, code, body)
	}

	shards := func(n *testNode, method, path string) router.ClusterRetention {
		t.Helper()
		code, body := call(t, method, n.url()+path, "", adminAuth)
		var out router.ClusterRetention
		if json.Unmarshal(body, &out) != nil || len(out.Shards) != testShards {
			t.Fatalf("%s %s through %s: %d %s", method, path, n.id, code, body)
		}
		return out
	}
	for _, e := range shards(b, http.MethodGet, "/admin/retention").Shards {
		if e.Status == nil || !e.Status.Paused || e.Status.Reason != "incident 7" {
			t.Fatalf("shard %d on %s not paused: %+v", e.Shard, e.Node, e)
		}
	}
	for _, e := range shards(b, http.MethodPost, "/admin/retention/run").Shards {
		if e.Code != http.StatusConflict || e.Result != nil {
			t.Fatalf("shard %d on %s ran while paused: %+v", e.Shard, e.Node, e)
		}
	}

	code, body = call(t, http.MethodPut, b.url()+"/admin/retention/pause", `{"paused":false}`, adminAuth)
	if code != http.StatusOK || json.Unmarshal(body, &st) != nil || st.Paused {
		t.Fatalf("resume through %s: %d %s", b.id, code, body)
	}
	for _, e := range shards(a, http.MethodPost, "/admin/retention/run").Shards {
		if e.Code != http.StatusOK || e.Result == nil {
			t.Fatalf("shard %d on %s after resume: %+v", e.Shard, e.Node, e)
		}
	}
}
