package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/pkg/keystore"
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

// reportHeld records in etcd what each node holds on disk, as a node does
// at start: nothing, unless shards are given for it ("node-3=0,4").
func reportHeld(t *testing.T, srv *etcdtest.Server, nodes ...string) {
	t.Helper()
	for _, spec := range nodes {
		id, list, _ := strings.Cut(spec, "=")
		var held []cluster.HeldShard
		for _, f := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' }) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, cluster.HeldShard{Shard: n, DatabaseID: fmt.Sprintf("db-%s-%d", id, n)})
		}
		if err := cluster.ReportHeld(context.Background(), srv.Client(t), cluster.Keys{Name: "progressdb"}, id, held); err != nil {
			t.Fatal(err)
		}
	}
}

// cluster create writes the shard map once: the same command again
// changes nothing and says so, another shard count or node list is
// refused (exit 1) naming what the cluster was created with, and bad
// arguments are usage errors.
func TestClusterCreate(t *testing.T) {
	srv := etcdtest.Start(t)
	h := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=5")
	reportHeld(t, srv, "node-1", "node-2", "node-3")

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

// cluster create --replicas 3 places each shard's replicas on three
// nodes and says so; the same command again changes nothing, another
// replica count is refused (exit 1), a count that is not 1, 3 or 5 or
// exceeds the nodes is a usage error that reads no report.
func TestClusterCreateReplicas(t *testing.T) {
	srv := etcdtest.Start(t)
	h := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=4")
	for _, args := range [][]string{
		{"--replicas", "2", "--nodes", "node-1,node-2,node-3"},
		{"--replicas", "3", "--nodes", "node-1,node-2"},
	} {
		if code, _, errOut := h.run(append([]string{"cluster", "create"}, args...)...); code != exitUsage ||
			!strings.Contains(errOut, "--replicas") {
			t.Errorf("%v: exit %d, %s", args, code, errOut)
		}
	}
	reportHeld(t, srv, "node-1", "node-2", "node-3")
	var rep clusterCreateReport
	out := h.mustRun("cluster", "create", "--replicas", "3", "--nodes", "node-1,node-2,node-3", "--json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if !rep.Created || rep.Replicas != 3 || len(rep.Nodes) != 3 || !slices.Equal(rep.Nodes[1].Shards, []int{0, 1, 2, 3}) {
		t.Fatalf("report %+v", rep)
	}
	if out := h.mustRun("cluster", "create", "--replicas", "3", "--nodes", "node-1,node-2,node-3"); !strings.Contains(out, "nothing changed") {
		t.Errorf("second create:\n%s", out)
	}
	code, _, errOut := h.run("cluster", "create", "--nodes", "node-1,node-2,node-3")
	if code != exitFailed || !strings.Contains(errOut, "exists with 3 replicas per shard, not 1") {
		t.Errorf("another replica count: exit %d, %s", code, errOut)
	}
}

// cluster create against an etcd that does not answer fails (exit 1)
// instead of hanging.
func TestClusterCreateEtcdDown(t *testing.T) {
	t.Parallel()
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

// notifyWriter collects what is written and signals each write.
type notifyWriter struct {
	mu    sync.Mutex
	b     strings.Builder
	wrote chan struct{}
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *notifyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// After etcd's data is lost, cluster create rebuilds the map from what
// the nodes hold (spec §10.1): it waits until every node named has
// reported, saying which it waits for, refuses (exit 1, nothing created)
// when one never does, and puts each shard a node holds on that node,
// the others round robin.
func TestClusterCreateFromWhatTheNodesHold(t *testing.T) {
	srv := etcdtest.Start(t)
	h := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=4")
	k := cluster.Keys{Name: "progressdb"}
	// Shard 0 was moved from node-1 to node-3; node-2 holds shard 1.
	reportHeld(t, srv, "node-1=", "node-3=2,0")

	code, _, errOut := h.run("cluster", "create", "--nodes", "node-1,node-2,node-3", "--wait", "200ms")
	if code != exitFailed || !strings.Contains(errOut, "node-2 has not reported") || !strings.Contains(errOut, "nothing was created") {
		t.Fatalf("a node missing: exit %d, %s", code, errOut)
	}
	if _, err := cluster.ReadMap(context.Background(), srv.Client(t), k); !errors.Is(err, cluster.ErrNoCluster) {
		t.Fatalf("a refused create wrote a map: %v", err)
	}

	stderr := &notifyWriter{wrote: make(chan struct{}, 1)}
	var stdout strings.Builder
	done := make(chan int)
	go func() {
		done <- Main(context.Background(), []string{"cluster", "create", "--nodes", "node-1,node-2,node-3"}, h.environ, nil, &stdout, stderr)
	}()
	<-stderr.wrote
	if !strings.Contains(stderr.String(), "waiting up to 5m0s for each node to report the shards it holds (a node reports when it starts); not yet: node-2") {
		t.Fatalf("while waiting: %s", stderr.String())
	}
	reportHeld(t, srv, "node-2=1")
	if code := <-done; code != exitOK {
		t.Fatalf("create: exit %d\n%s", code, stderr.String())
	}
	m, err := cluster.ReadMap(context.Background(), srv.Client(t), k)
	if err != nil || !slices.Equal(m.Homes, []string{"node-3", "node-2", "node-3", "node-1"}) {
		t.Fatalf("map %+v %v, want shard 0 and 2 on node-3, 1 on node-2, 3 round robin", m, err)
	}
	if !strings.Contains(stdout.String(), "node-3  0,2") {
		t.Errorf("create printed:\n%s", stdout.String())
	}
}

// Two nodes holding a database of one shard: cluster create refuses (exit
// 1) naming the shard and both nodes with their databases, and creates
// nothing. A node holding a shard the count does not have is refused too.
func TestClusterCreateRefusesAShardHeldTwice(t *testing.T) {
	srv := etcdtest.Start(t)
	h := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=3")
	reportHeld(t, srv, "node-1=0,1", "node-2=", "node-3=2,1")
	code, _, errOut := h.run("cluster", "create", "--nodes", "node-1,node-2,node-3")
	for _, want := range []string{"shard 1 is held by node-1 (database_id db-node-1-1) and node-3 (database_id db-node-3-1)", "shards/1"} {
		if code != exitFailed || !strings.Contains(errOut, want) {
			t.Fatalf("shard held twice: exit %d, %s; want %q", code, errOut, want)
		}
	}
	if _, err := cluster.ReadMap(context.Background(), srv.Client(t), cluster.Keys{Name: "progressdb"}); !errors.Is(err, cluster.ErrNoCluster) {
		t.Fatalf("a refused create wrote a map: %v", err)
	}

	reportHeld(t, srv, "node-3=2,7")
	code, _, errOut = h.run("cluster", "create", "--nodes", "node-1,node-2,node-3")
	if code != exitFailed || !strings.Contains(errOut, "node node-3 holds shard 7") {
		t.Fatalf("a shard beyond the count: exit %d, %s", code, errOut)
	}
}

// cluster create with PROGRESSDB_KEK makes the cluster's receipt key in
// etcd, wrapped by the KEK and never in clear; created again, it keeps it;
// with another KEK, the command exits 2 naming PROGRESSDB_KEK.
func TestClusterCreateMakesTheReceiptKey(t *testing.T) {
	srv := etcdtest.Start(t)
	keys := "PROGRESSDB_KEYSTORE_PATH=" + filepath.Join(t.TempDir(), "keys")
	h := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=2", "PROGRESSDB_KEK="+testKEK(5), keys)
	reportHeld(t, srv, "node-1")
	read := func() []byte {
		resp, err := srv.Client(t).Get(context.Background(), cluster.Keys{Name: "progressdb"}.ReceiptKey())
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("the receipt key in etcd: %v", err)
		}
		return resp.Kvs[0].Value
	}
	h.mustRun("cluster", "create", "--nodes", "node-1")
	first := read()
	kek, err := keystore.OpenKEK(context.Background(), testKEK(5))
	if err != nil {
		t.Fatal(err)
	}
	defer kek.Close()
	plain, err := kek.Decrypt(context.Background(), first)
	if err != nil || len(plain) != 32 || bytes.Contains(first, plain) {
		t.Fatalf("the value in etcd is not the key wrapped by the KEK: %v", err)
	}
	h.mustRun("cluster", "create", "--nodes", "node-1")
	if !bytes.Equal(read(), first) {
		t.Error("a second cluster create replaced the receipt key")
	}
	other := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=2", "PROGRESSDB_KEK="+testKEK(6), keys)
	if code, _, errOut := other.run("cluster", "create", "--nodes", "node-1"); code != exitUsage || !strings.Contains(errOut, "PROGRESSDB_KEK") {
		t.Errorf("another KEK: exit %d, %s", code, errOut)
	}
}
