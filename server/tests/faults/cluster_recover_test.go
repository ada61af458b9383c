package faults

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
)

// etcdClient dials the etcd at endpoints for the test's own reads and
// writes of the cluster's keys.
func etcdClient(t testing.TB, endpoints string) *clientv3.Client {
	t.Helper()
	c, err := etcdtest.NewClient(strings.Split(endpoints, ","))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// threadMessages reads thread tid's message bodies through s (its status
// and the bodies).
func threadMessages(t testing.TB, s *server, tid string) []string {
	t.Helper()
	var page struct {
		Messages []struct {
			Body string `json:"body"`
		} `json:"messages"`
	}
	s.mustCall(t, "GET", "/v1/threads/"+tid+"/messages", nil, "", http.StatusOK, &page)
	var bodies []string
	for _, m := range page.Messages {
		bodies = append(bodies, m.Body)
	}
	return bodies
}

// TestFaultClusterRecoveredEtcd loses etcd's data after shard 0 was moved
// from node-1 to node-3 (spec §10.1), and recovers as docs/cluster.md
// says: a new etcd, its revision raised above every epoch, the nodes
// started on their volumes and `progressdb cluster create` with the same
// nodes. The nodes report what they hold and create puts shard 0 where
// its data is, on node-3: its acknowledged thread reads back through
// every node, node-1 holds no database for it, and writes go on. Before
// that, a map made without the reports (the round robin, as an older
// create wrote it) naming node-1 home of shard 0 makes node-1 refuse to
// start (exit 1 naming shard 0 and node-3) rather than open an empty
// database for it.
func TestFaultClusterRecoveredEtcd(t *testing.T) {
	t.Parallel()
	etcd := startEtcd(t)
	envs := clusterEnvs(t, etcd.endpoints())
	nodes := startNodes(t, envs)
	nodes[0].mustCall(t, "POST", "/admin/cluster/shards/0/move", map[string]string{"to": "node-3"}, adminToken, http.StatusOK, nil)
	tid := threadInShard(0, 1)
	nodes[1].mustCall(t, "POST", "/v1/threads", map[string]string{"id": tid, "title": "t", "author": "a"}, "", http.StatusCreated, nil)
	nodes[1].mustCall(t, "POST", "/v1/threads/"+tid+"/messages", map[string]any{"author": "a", "body": "before"}, "", http.StatusCreated, nil)
	get, err := etcdClient(t, etcd.endpoints()).Get(context.Background(), "/")
	if err != nil {
		t.Fatal(err)
	}
	lastRev := get.Header.Revision

	// etcd's data is lost with the machines.
	etcd.kill()
	for _, n := range nodes {
		n.kill()
	}
	fresh := startEtcd(t)
	c := etcdClient(t, fresh.endpoints())
	for {
		resp, err := c.Put(context.Background(), "/bump", "x")
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision > lastRev {
			break
		}
	}
	for id, env := range envs {
		envs[id] = env.with("PROGRESSDB_CLUSTER_ETCD", fresh.endpoints())
	}

	// A map made without the nodes' reports: node-1 is shard 0's home.
	k := cluster.Keys{Name: "progressdb"}
	blind := `{"shards":3,"homes":["node-1","node-2","node-3"],"nodes":["node-1","node-2","node-3"]}`
	if _, err := c.Put(context.Background(), k.ShardMap(), blind); err != nil {
		t.Fatal(err)
	}
	node3 := startClusterNode(t, envs["node-3"])
	node1 := start(t, envs["node-1"].with("PROGRESSDB_ADDR", freeAddr(t), "PROGRESSDB_ADVERTISE_URL", "https://127.0.0.1:1"), "serve")
	if code := node1.wait(t, time.Minute); code != 1 ||
		!strings.Contains(node1.stderr.String(), "shard 0: the shard map names node node-1 its home") ||
		!strings.Contains(node1.stderr.String(), "node node-3 holds one") {
		t.Fatalf("node-1 under a map naming it home of node-3's shard: exit %d\n%s", code, node1.output())
	}
	if _, err := os.Stat(cluster.ShardDBPath(envs["node-1"]["PROGRESSDB_DB_PATH"], 0)); !os.IsNotExist(err) {
		t.Fatalf("node-1 made a folder for shard 0: %v", err)
	}
	if code := node3.stop(t); code != 0 {
		t.Fatalf("node-3 exit %d\n%s", code, node3.output())
	}
	if _, err := c.Delete(context.Background(), k.ShardMap()); err != nil {
		t.Fatal(err)
	}

	// As the docs say: start the nodes, then create.
	nodes = startNodes(t, envs)
	st := clusterState(t, nodes[0])
	if homes := []string{st.Shards[0].Home, st.Shards[1].Home, st.Shards[2].Home}; strings.Join(homes, ",") != "node-3,node-2,node-3" {
		t.Fatalf("shard homes after the recovery: %v", homes)
	}
	for _, n := range nodes {
		if got := threadMessages(t, n, tid); strings.Join(got, ",") != "before" {
			t.Fatalf("thread %s through %s after the recovery: %v", tid, n.url, got)
		}
	}
	if _, err := os.Stat(cluster.ShardDBPath(envs["node-1"]["PROGRESSDB_DB_PATH"], 0)); !os.IsNotExist(err) {
		t.Fatalf("node-1 made a folder for shard 0: %v", err)
	}
	nodes[0].mustCall(t, "POST", "/v1/threads/"+tid+"/messages", map[string]any{"author": "a", "body": "after"}, "", http.StatusCreated, nil)
	if got := threadMessages(t, nodes[2], tid); strings.Join(got, ",") != "before,after" {
		t.Fatalf("thread %s after a write: %v", tid, got)
	}
	for _, n := range nodes {
		if code := n.stop(t); code != 0 {
			t.Fatalf("node exit status %d after SIGTERM\n%s", code, n.output())
		}
	}
}

// TestFaultClusterNodeRestartedAtOnce kills node-3 with SIGKILL and starts
// it again at once, as a supervisor does, while its registration and its
// ownership still live in etcd (spec §10.1): the node waits for its old
// registration to lapse (at most twice the lease TTL), takes its shard
// back under a new epoch and serves what was acknowledged. A second
// process under a node ID a live process holds still exits 1, once the
// registration has outlived twice the TTL.
func TestFaultClusterNodeRestartedAtOnce(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	envs := clusterEnvs(t, strings.Join(etcd.Endpoints(), ","))
	nodes := startNodes(t, envs)
	tid := threadInShard(2, 1)
	nodes[0].mustCall(t, "POST", "/v1/threads", map[string]string{"id": tid, "title": "t", "author": "a"}, "", http.StatusCreated, nil)
	nodes[0].mustCall(t, "POST", "/v1/threads/"+tid+"/messages", map[string]any{"author": "a", "body": "before"}, "", http.StatusCreated, nil)
	before := clusterState(t, nodes[0]).Shards[2].Epoch

	nodes[2].kill()
	nodes[2] = startClusterNodeAt(t, envs["node-3"], nodes[2].addr())
	if !strings.Contains(nodes[2].stdout.String()+nodes[2].stderr.String(), "cluster_node_waiting_for_registration") {
		t.Fatalf("the restarted node did not wait for its old registration\n%s", nodes[2].output())
	}
	waitFor(t, time.Minute, "the restarted node to own its shard", func() bool {
		s := clusterState(t, nodes[0]).Shards[2]
		return s.State == cluster.ShardOwned && s.Epoch > before
	})
	nodes[1].mustCall(t, "POST", "/v1/threads/"+tid+"/messages", map[string]any{"author": "a", "body": "after"}, "", http.StatusCreated, nil)
	for _, n := range nodes {
		if got := threadMessages(t, n, tid); strings.Join(got, ",") != "before,after" {
			t.Fatalf("thread %s through %s after the restart: %v", tid, n.url, got)
		}
	}

	twin := start(t, envs["node-3"].with("PROGRESSDB_ADDR", freeAddr(t), "PROGRESSDB_ADVERTISE_URL", "https://127.0.0.1:1"), "serve")
	if code := twin.wait(t, time.Minute); code != 1 || !strings.Contains(twin.stderr.String(), "node id registered by a running process") {
		t.Fatalf("a second process as node-3: exit %d\n%s", code, twin.output())
	}
	for _, n := range nodes {
		if code := n.stop(t); code != 0 {
			t.Fatalf("node exit status %d after SIGTERM\n%s", code, n.output())
		}
	}
}
