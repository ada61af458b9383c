package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

const (
	testSecret     = "0123456789abcdef-secret"
	testAdminToken = "admin-token"
	testShards     = 4
)

// testNode is one cluster node served in the test process.
type testNode struct {
	id, addr, dir string
	stop          context.CancelFunc
	done          chan error
}

func (n *testNode) url() string { return "http://" + n.addr }

// startNode serves node id of the cluster on etcd until the test ends or
// it is stopped.
func startNode(t *testing.T, etcd *etcdtest.Server, id, dir string) *testNode {
	t.Helper()
	return startNodeLogging(t, etcd, id, dir, testLogger(t))
}

// startNodeLogging is startNode logging to logger, with more settings
// (later ones win).
func startNodeLogging(t *testing.T, etcd *etcdtest.Server, id, dir string, logger *slog.Logger, extra ...string) *testNode {
	t.Helper()
	n := &testNode{id: id, addr: freeAddr(t), dir: dir, done: make(chan error, 1)}
	cfg, err := config.Load(append([]string{
		"PROGRESSDB_DB_PATH=" + filepath.Join(dir, "data"),
		"PROGRESSDB_ADDR=" + n.addr,
		"PROGRESSDB_ADMIN_TOKEN=" + testAdminToken,
		"PROGRESSDB_CLUSTER_ETCD=" + strings.Join(etcd.Endpoints(), ","),
		"PROGRESSDB_CLUSTER_NAME=chat",
		"PROGRESSDB_NODE_ID=" + id,
		"PROGRESSDB_ADVERTISE_URL=" + n.url(),
		"PROGRESSDB_CLUSTER_SECRET=" + testSecret,
		fmt.Sprintf("PROGRESSDB_CLUSTER_SHARDS=%d", testShards),
		"PROGRESSDB_CLUSTER_LEASE_TTL=3s",
	}, extra...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.stop = cancel
	go func() { n.done <- Serve(ctx, cfg, logger) }()
	t.Cleanup(n.shutdown)
	if code := waitAnswering(t, n.addr); code != http.StatusOK {
		t.Fatalf("node %s /healthz: %d", id, code)
	}
	return n
}

func (n *testNode) shutdown() {
	if n.stop == nil {
		return
	}
	n.stop()
	n.stop = nil
	<-n.done
}

// startCluster creates a cluster of the nodes named and starts them; each
// node's home shards are owned before it returns.
func startCluster(t *testing.T, ids ...string) (*etcdtest.Server, []*testNode) {
	t.Helper()
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.CreateCluster(ctx, etcd.Client(t), cluster.Keys{Name: "chat"}, testShards, ids); err != nil {
		t.Fatal(err)
	}
	var nodes []*testNode
	for _, id := range ids {
		nodes = append(nodes, startNode(t, etcd, id, t.TempDir()))
	}
	waitOwned(t, etcd, testShards)
	return etcd, nodes
}

// waitOwned waits until etcd shows want shards owned.
func waitOwned(t *testing.T, etcd *etcdtest.Server, want int) cluster.Status {
	t.Helper()
	c := etcd.Client(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := cluster.ReadStatus(ctx, c, cluster.Keys{Name: "chat"})
		cancel()
		owned := 0
		for _, s := range st.Shards {
			if s.State == cluster.ShardOwned {
				owned++
			}
		}
		if err == nil && owned == want {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d shards owned not seen: %+v, %v", want, st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var adminAuth = http.Header{"Authorization": {"Bearer " + testAdminToken}}

func call(t *testing.T, method, url, body string, h http.Header) (int, []byte) {
	t.Helper()
	code, b, _ := sendTLS(t, http.DefaultClient, method, url, body, h)
	return code, b
}

// retryCall calls as the clients do on a replicated cluster: a 503 (a
// leader being elected, or not yet serving its term) or a 421 (a node
// that is not the shard's leader) is tried again, for at most 30 s.
func retryCall(t *testing.T, method, url, body string, h http.Header) (int, []byte) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, got := call(t, method, url, body, h)
		if code != http.StatusServiceUnavailable && code != http.StatusMisdirectedRequest || time.Now().After(deadline) {
			return code, got
		}
	}
}

// openShard opens shard n of a stopped node's folder.
func openShard(t *testing.T, n *testNode, shard int) *store.Store {
	t.Helper()
	st, err := store.Open(cluster.ShardDBPath(filepath.Join(n.dir, "data"), shard), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Writes through any node land in the thread's shard on the node that owns
// it, and read back through every node; the listing through any node
// merges every shard's page in ID order, page by page with the cursor.
func TestClusterRoutesAndMergesListings(t *testing.T) {
	t.Parallel()
	_, nodes := startCluster(t, "node-a", "node-b", "node-c")
	var ids []string
	for i := range 12 {
		id := fmt.Sprintf("t%02d", i)
		seedThread(t, nodes[i%len(nodes)], id)
		ids = append(ids, id)
	}
	checkThreads(t, nodes, ids)
	for _, n := range nodes {
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			url := n.url() + "/v1/threads?limit=5"
			if cursor != "" {
				url += "&cursor=" + cursor
			}
			code, body := call(t, http.MethodGet, url, "", nil)
			var page struct {
				Threads []struct {
					ID string `json:"id"`
				} `json:"threads"`
				NextCursor string `json:"next_cursor"`
			}
			if code != http.StatusOK || json.Unmarshal(body, &page) != nil {
				t.Fatalf("list through %s: %d %s", n.id, code, body)
			}
			if len(page.Threads) != 5 && page.NextCursor != "" {
				t.Fatalf("short page with a cursor through %s: %s", n.id, body)
			}
			for _, th := range page.Threads {
				got = append(got, th.ID)
			}
			if cursor = page.NextCursor; cursor == "" {
				break
			}
			if pages > 10 {
				t.Fatal("listing does not end")
			}
		}
		if !slices.Equal(got, ids) {
			t.Fatalf("listing through %s = %v, want %v", n.id, got, ids)
		}
	}
	// node-a owns shards 0 and 3; the others' requests went to their owners.
	code, body := call(t, http.MethodGet, nodes[0].url()+"/metrics", "", nil)
	for _, want := range []string{"progressdb_cluster_shards_owned 2\n", `progressdb_cluster_forwarded_total{result="ok"}`,
		"progressdb_cluster_fencing_rejections_total 0\n", "progressdb_cluster_etcd_errors_total"} {
		if code != http.StatusOK || !bytes.Contains(body, []byte(want)) {
			t.Fatalf("/metrics of node-a lacks %q: %d\n%s", want, code, body)
		}
	}
	// Each thread is in its shard's database on that shard's home node
	// and nowhere else.
	for _, n := range nodes {
		n.shutdown()
	}
	homes := map[int]*testNode{}
	for i := range testShards {
		homes[i] = nodes[i%len(nodes)] // CreateCluster spreads round robin
	}
	opened := map[int]*store.Store{}
	for _, id := range ids {
		shard := cluster.ShardOf(id, testShards)
		if opened[shard] == nil {
			opened[shard] = openShard(t, homes[shard], shard)
		}
		if _, err := opened[shard].GetThread(context.Background(), id); err != nil {
			t.Fatalf("thread %s not in shard %d on %s: %v", id, shard, homes[shard].id, err)
		}
	}
}

// testLogger logs warnings and errors through t.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// threadIn returns a thread ID in shard n.
func threadIn(t *testing.T, n int) string {
	t.Helper()
	for i := range 10000 {
		id := fmt.Sprintf("th%d", i)
		if cluster.ShardOf(id, testShards) == n {
			return id
		}
	}
	t.Fatalf("no thread ID for shard %d", n)
	return ""
}

// A client cannot pose as a node: node headers without the secret, or with
// another, are refused. A node's call with an epoch that is not the
// shard's current one gets 421; after the owner's ownership is taken again
// with a new epoch, writes through another node still land (with the map
// from etcd). A shard whose owner is down answers 503 naming it, and so
// does the listing, instead of a short page.
func TestClusterNodeHeadersEpochsAndOwnerDown(t *testing.T) {
	t.Parallel()
	etcd, nodes := startCluster(t, "node-a", "node-b", "node-c")
	a, b, c := nodes[0], nodes[1], nodes[2]
	tb := threadIn(t, 1) // shard 1: node-b's
	if code, body := call(t, http.MethodPost, a.url()+"/v1/threads", `{"id":"`+tb+`","title":"x","author":"u"}`, nil); code != http.StatusCreated {
		t.Fatalf("create through node-a: %d %s", code, body)
	}

	for _, h := range []http.Header{
		{"X-Progressdb-Epoch": {"1"}},
		{"X-Progressdb-Shard": {"1"}},
		{"X-Progressdb-Cluster-Secret": {"not-the-secret-at-all"}, "X-Progressdb-Epoch": {"1"}},
		{"X-Progressdb-Cluster-Secret": {""}, "X-Progressdb-Node": {"node-a"}},
	} {
		for _, n := range nodes {
			if code, body := call(t, http.MethodGet, n.url()+"/v1/threads/"+tb, "", h); code != http.StatusForbidden {
				t.Fatalf("node headers %v through %s: %d %s", h, n.id, code, body)
			}
		}
	}

	st := waitOwned(t, etcd, testShards)
	epoch := st.Shards[1].Epoch
	stale := http.Header{"X-Progressdb-Cluster-Secret": {testSecret}, "X-Progressdb-Epoch": {fmt.Sprint(epoch - 1)},
		"X-Progressdb-Node": {"node-a"}}
	code, body := call(t, http.MethodGet, b.url()+"/v1/threads/"+tb, "", stale)
	if code != http.StatusMisdirectedRequest || !bytes.Contains(body, []byte("shard 1")) {
		t.Fatalf("stale epoch: %d %s", code, body)
	}
	current := http.Header{"X-Progressdb-Cluster-Secret": {testSecret}, "X-Progressdb-Epoch": {fmt.Sprint(epoch)}}
	if code, body := call(t, http.MethodGet, b.url()+"/v1/threads/"+tb, "", current); code != http.StatusOK {
		t.Fatalf("current epoch: %d %s", code, body)
	}

	// etcd ends node-b's ownership of shard 1 (as when its lease runs
	// out); node-b takes it again with a larger epoch.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := etcd.DirectClient(t).Get(ctx, cluster.Keys{Name: "chat"}.ShardOwner(1))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("owner key: %v", err)
	}
	etcd.Revoke(t, clientv3.LeaseID(resp.Kvs[0].Lease))
	deadline := time.Now().Add(30 * time.Second)
	for {
		st = waitOwned(t, etcd, testShards)
		if st.Shards[1].Epoch > epoch {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("shard 1 not taken again: %+v", st.Shards[1])
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := call(t, http.MethodGet, b.url()+"/v1/threads/"+tb, "", current); code != http.StatusMisdirectedRequest {
		t.Fatalf("the old epoch after a new ownership: %d %s", code, body)
	}
	code, body = call(t, http.MethodPost, a.url()+"/v1/threads/"+tb+"/messages", `{"author":"u","body":"after"}`, nil)
	if code != http.StatusCreated {
		t.Fatalf("write through node-a after the new epoch: %d %s", code, body)
	}

	// node-c stops: shard 2 has no owner.
	c.shutdown()
	tc := threadIn(t, 2)
	code, body = call(t, http.MethodGet, a.url()+"/v1/threads/"+tc, "", nil)
	if code != http.StatusServiceUnavailable || !bytes.Contains(body, []byte("shard 2")) {
		t.Fatalf("thread of a down shard: %d %s", code, body)
	}
	code, body = call(t, http.MethodGet, b.url()+"/v1/threads", "", nil)
	if code != http.StatusServiceUnavailable || !bytes.Contains(body, []byte("shard 2")) {
		t.Fatalf("listing with a down shard: %d %s", code, body)
	}
	// The other shards go on.
	if code, body := call(t, http.MethodGet, a.url()+"/v1/threads/"+tb+"/messages", "", nil); code != http.StatusOK ||
		!bytes.Contains(body, []byte("after")) {
		t.Fatalf("a live shard with one node down: %d %s", code, body)
	}
}

// A shard moves between nodes run by serve: asked of its home, the target
// pulls the shard's trail and backup from it, restores and takes it; the
// home deletes its copy and records the move in the shard's trail, which
// verifies. With the old home stopped, the shard is served by the target
// (reads and writes through it), and the old home started again leaves it
// there.
func TestClusterMoveShardBetweenServedNodes(t *testing.T) {
	t.Parallel()
	etcd, nodes := startCluster(t, "node-a", "node-b")
	a, b := nodes[0], nodes[1]
	tid := threadIn(t, 0) // home node-a
	if code, body := call(t, http.MethodPost, b.url()+"/v1/threads", `{"id":"`+tid+`","title":"x","author":"u"}`, nil); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, body := call(t, http.MethodPost, b.url()+"/v1/threads/"+tid+"/messages", `{"author":"u","body":"before"}`, nil); code != http.StatusCreated {
		t.Fatalf("append: %d %s", code, body)
	}
	code, body := call(t, http.MethodPost, a.url()+"/admin/cluster/shards/0/move", `{"to":"node-b"}`, adminAuth)
	if code != http.StatusOK {
		t.Fatalf("move: %d %s", code, body)
	}
	var res cluster.MoveResult
	if err := json.Unmarshal(body, &res); err != nil || !res.Removed || res.Threads != 1 || res.Messages != 1 {
		t.Fatalf("move: %s (%v)", body, err)
	}
	if m, _ := filepath.Glob(cluster.ShardDBPath(filepath.Join(a.dir, "data"), 0)); len(m) != 0 {
		t.Fatalf("node-a's copy of shard 0 is still there")
	}
	trail := cluster.ShardAuditPath(filepath.Join(a.dir, "data", "purge_audit"), 0)
	if rep, err := audit.VerifyDirWith(trail, audit.VerifyOptions{}); err != nil || len(rep.Problems) > 0 || rep.Files != 1 {
		t.Fatalf("node-a's trail of shard 0: %+v, %v", rep, err)
	}

	a.shutdown()
	waitOwned(t, etcd, testShards/2+1) // node-b's own two and shard 0
	if code, body := call(t, http.MethodGet, b.url()+"/v1/threads/"+tid+"/messages", "", nil); code != http.StatusOK ||
		!bytes.Contains(body, []byte(`"before"`)) {
		t.Fatalf("read with node-a down: %d %s", code, body)
	}
	if code, body := call(t, http.MethodPost, b.url()+"/v1/threads/"+tid+"/messages", `{"author":"u","body":"after"}`, nil); code != http.StatusCreated {
		t.Fatalf("write with node-a down: %d %s", code, body)
	}
	a = startNode(t, etcd, "node-a", a.dir)
	waitOwned(t, etcd, testShards)
	if code, body := call(t, http.MethodGet, a.url()+"/v1/threads/"+tid+"/messages", "", nil); code != http.StatusOK ||
		!bytes.Contains(body, []byte(`"after"`)) {
		t.Fatalf("read through node-a started again: %d %s", code, body)
	}
	if m, _ := filepath.Glob(cluster.ShardDBPath(filepath.Join(a.dir, "data"), 0)); len(m) != 0 {
		t.Fatalf("node-a opened shard 0 again")
	}
}

// TestClusterNodeWarnsOfAnAuditFolderInsideTheDatabase: a node replays
// each shard's purges at start from the shard's trail, which a folder
// copied back by hand would bring with it when it lies inside DB_PATH; with
// backups on, the node warns as a single server does.
func TestClusterNodeWarnsOfAnAuditFolderInsideTheDatabase(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.CreateCluster(ctx, etcd.Client(t), cluster.Keys{Name: "chat"}, testShards, []string{"node-a"}); err != nil {
		t.Fatal(err)
	}
	for _, inside := range []bool{true, false} {
		dir := t.TempDir()
		env := []string{"PROGRESSDB_BACKUP_PATH=" + filepath.Join(dir, "backups")}
		if !inside {
			env = append(env, "PROGRESSDB_RETENTION_AUDIT_PATH="+filepath.Join(dir, "audit"))
		}
		logs := &lockedLog{}
		n := startNodeLogging(t, etcd, "node-a", dir, slog.New(slog.NewTextHandler(logs, nil)), env...)
		n.shutdown()
		if got := strings.Contains(logs.String(), "audit_path_inside_db_path"); got != inside {
			t.Errorf("audit folder inside: %v; warned: %v\n%s", inside, got, logs.String())
		}
	}
}

// seedThread creates thread id through via, with one message "hi".
func seedThread(t *testing.T, via *testNode, id string) {
	t.Helper()
	code, body := call(t, http.MethodPost, via.url()+"/v1/threads", fmt.Sprintf(`{"id":%q,"title":"x","author":"u"}`, id), nil)
	if code != http.StatusCreated {
		t.Fatalf("create %s through %s: %d %s", id, via.id, code, body)
	}
	code, body = call(t, http.MethodPost, via.url()+"/v1/threads/"+id+"/messages", `{"author":"u","body":{"text":"hi"}}`, nil)
	if code != http.StatusCreated {
		t.Fatalf("append to %s through %s: %d %s", id, via.id, code, body)
	}
}

// seedShards seeds a thread in every shard, shard n's through
// via[n%len(via)], and returns them by shard.
func seedShards(t *testing.T, via []*testNode) []string {
	t.Helper()
	var threads []string
	for n := range testShards {
		tid := threadIn(t, n)
		seedThread(t, via[n%len(via)], tid)
		threads = append(threads, tid)
	}
	return threads
}

// checkThreads reads each thread seedThread made through every node.
func checkThreads(t *testing.T, nodes []*testNode, ids []string) {
	t.Helper()
	for _, n := range nodes {
		for _, id := range ids {
			if code, body := call(t, http.MethodGet, n.url()+"/v1/threads/"+id+"/messages", "", nil); code != http.StatusOK ||
				!bytes.Contains(body, []byte(`"hi"`)) {
				t.Fatalf("read %s through %s: %d %s", id, n.id, code, body)
			}
		}
	}
}
