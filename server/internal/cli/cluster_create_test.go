package cli

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
)

// clusterHarness is a node's environment pointing at a real etcd.
func clusterHarness(t *testing.T, srv *etcdtest.Server, extra ...string) *harness {
	t.Helper()
	return newHarness(t, append([]string{
		"PROGRESSDB_CLUSTER_ETCD=" + strings.Join(srv.Endpoints(), ","),
		"PROGRESSDB_NODE_ID=node-1",
		"PROGRESSDB_ADVERTISE_URL=http://127.0.0.1:8081",
		"PROGRESSDB_CLUSTER_SECRET=0123456789abcdef",
	}, extra...)...)
}

// cluster create writes the shard map once: the same command again
// changes nothing and says so, another shard count or node list is
// refused (exit 1) naming what the cluster was created with, and bad
// arguments are usage errors.
func TestClusterCreate(t *testing.T) {
	srv := etcdtest.Start(t)
	h := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=5")

	var rep clusterCreateReport
	out := h.mustRun("cluster", "create", "--nodes", "node-1,node-2,node-3", "--json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if !rep.Created || rep.Shards != 5 || len(rep.Nodes) != 3 || !slices.Equal(rep.Nodes[1].Shards, []int{1, 4}) {
		t.Fatalf("report %+v", rep)
	}
	m, err := cluster.ReadMap(context.Background(), srv.Client(t), cluster.Keys{Name: "progressdb"})
	if err != nil || !slices.Equal(m.Homes, []string{"node-1", "node-2", "node-3", "node-1", "node-2"}) {
		t.Fatalf("map in etcd: %+v %v", m, err)
	}

	out = h.mustRun("cluster", "create", "--nodes", "node-1,node-2,node-3")
	if !strings.Contains(out, "nothing changed") || !strings.Contains(out, "node-2  1,4") {
		t.Errorf("second create:\n%s", out)
	}

	code, _, errOut := h.run("cluster", "create", "--nodes", "node-1,node-2")
	if code != exitFailed || !strings.Contains(errOut, "node-1,node-2,node-3") {
		t.Errorf("other nodes: exit %d, %s", code, errOut)
	}
	other := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=8")
	code, _, errOut = other.run("cluster", "create", "--nodes", "node-1,node-2,node-3")
	if code != exitFailed || !strings.Contains(errOut, "exists with 5 shards, not 8") {
		t.Errorf("other shard count: exit %d, %s", code, errOut)
	}
	if m2, _ := cluster.ReadMap(context.Background(), srv.Client(t), cluster.Keys{Name: "progressdb"}); !slices.Equal(m2.Homes, m.Homes) {
		t.Errorf("refused creations changed the map: %+v", m2)
	}

	for _, args := range [][]string{
		{"cluster", "create"},
		{"cluster", "create", "--nodes", "node-1,node-1"},
		{"cluster", "create", "--nodes", "node-1,,node-2"},
		{"cluster", "create", "--nodes", "a b"},
	} {
		if code, _, errOut := h.run(args...); code != exitUsage || !strings.Contains(errOut, "--nodes") {
			t.Errorf("%v: exit %d, %s", args, code, errOut)
		}
	}
	single := newHarness(t)
	if code, _, errOut := single.run("cluster", "create", "--nodes", "node-1"); code != exitUsage || !strings.Contains(errOut, "PROGRESSDB_CLUSTER_ETCD") {
		t.Errorf("without etcd: exit %d, %s", code, errOut)
	}
}

// cluster create against an etcd that does not answer fails (exit 1)
// instead of hanging.
func TestClusterCreateEtcdDown(t *testing.T) {
	srv := etcdtest.Start(t)
	h := clusterHarness(t, srv)
	srv.Stop()
	code, _, errOut := h.run("cluster", "create", "--nodes", "node-1")
	if code != exitFailed || !strings.Contains(errOut, "progressdb cluster create:") {
		t.Errorf("etcd down: exit %d, %s", code, errOut)
	}
}

// retention pause and resume on a cluster node set the cluster's switch in
// etcd, which every shard's runner reads; no database is opened.
func TestClusterRetentionPause(t *testing.T) {
	srv := etcdtest.Start(t)
	h := clusterHarness(t, srv)
	var st struct {
		Paused bool   `json:"paused"`
		Reason string `json:"paused_reason"`
	}
	out := h.mustRun("retention", "pause", "--reason", "legal review", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || !st.Paused || st.Reason != "legal review" {
		t.Fatalf("pause --json: %v %s", err, out)
	}
	sw := &cluster.Pause{Client: srv.Client(t), Keys: cluster.Keys{Name: "progressdb"}}
	if p, err := sw.Get(context.Background()); err != nil || !p.Paused || p.Reason != "legal review" {
		t.Fatalf("switch in etcd after pause: %+v, %v", p, err)
	}
	if out := h.mustRun("retention", "resume"); !strings.Contains(out, "paused:          no") {
		t.Fatalf("resume: %s", out)
	}
	if p, err := sw.Get(context.Background()); err != nil || p.Paused {
		t.Fatalf("switch in etcd after resume: %+v, %v", p, err)
	}
}
