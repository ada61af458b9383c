package cli

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
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
