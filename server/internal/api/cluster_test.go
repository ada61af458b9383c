package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/router"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

const (
	secret     = "0123456789abcdef-cluster"
	adminToken = "adm"
)

// node is a cluster node in the test process: its shards, ownership, view,
// router and API on a loopback server.
type node struct {
	id     string
	srv    *httptest.Server
	owner  *cluster.Owner
	reg    *prometheus.Registry
	stop   func()
	frozen atomic.Bool // answers nothing while set, as a stopped process
}

func startNode(t testing.TB, etcd *etcdtest.Server, id string) *node {
	t.Helper()
	return startNodeWith(t, etcd, id, true, 0)
}

// startTwoNodes creates the cluster "chat" of two shards, homed on node-a
// and node-b, starts both nodes and waits until each owns its home shard.
func startTwoNodes(t testing.TB, etcd *etcdtest.Server) (a, b *node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.CreateCluster(ctx, etcd.Client(t), cluster.Keys{Name: "chat"}, 2, []string{"node-a", "node-b"}); err != nil {
		t.Fatal(err)
	}
	a, b = startNode(t, etcd, "node-a"), startNode(t, etcd, "node-b")
	for shard, n := range []*node{a, b} {
		if _, err := n.owner.WaitOwned(ctx, shard, 0); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

// startNodeWith starts a node whose view of the cluster follows etcd's
// changes when watch is set, and is read only when it asks otherwise.
// A node's calls to others time out after timeout (the default when 0).
func startNodeWith(t testing.TB, etcd *etcdtest.Server, id string, watch bool, timeout time.Duration) *node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var h http.Handler
	n := &node{id: id}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.frozen.Load() {
			<-r.Context().Done() // a frozen process answers nothing
			return
		}
		h.ServeHTTP(w, r)
	}))
	c := etcd.Client(t)
	keys := cluster.Keys{Name: "chat"}
	m, err := cluster.ReadMap(ctx, c, keys)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// Each shard's attachments in a folder of its own, as a node keeps them.
	blobs := func(n int) (*attachments.Blobs, error) {
		u, err := cluster.ShardAttachmentsURL("file://"+filepath.ToSlash(filepath.Join(dir, "attachments")), n)
		if err != nil {
			return nil, err
		}
		return attachments.Open(ctx, u)
	}
	shards, err := cluster.OpenShards(filepath.Join(dir, "data"), m.HeldBy(id), store.Options{}, nil, blobs)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := cluster.StartOwner(ctx, cluster.OwnerOptions{Client: c, Keys: keys, Node: id, URL: srv.URL,
		Owner: id + "/1", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	viewCtx, stopWatch := context.WithCancel(ctx)
	view, err := router.NewView(viewCtx, c, keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !watch {
		stopWatch()
	}

	rcfg := config.Retention{Enabled: true, Period: 30 * 24 * time.Hour, MessagePeriod: 30 * 24 * time.Hour,
		MinPeriod: time.Hour, Cron: "0 2 * * *", AuditPath: filepath.Join(dir, "audit")}
	var svcMu sync.Mutex
	services := map[int]*retention.Manager{}
	attach := func(n int) {
		st, _ := shards.Store(n)
		shard := n
		rc := rcfg
		rc.AuditPath = cluster.ShardAuditPath(rcfg.AuditPath, n)
		runner, err := retention.NewRunner(retention.RunnerOptions{Store: st, Config: rc,
			Coordinator: owner.Coordinator(n), Fenced: true, Shard: &shard})
		if err != nil {
			t.Error(err)
			return
		}
		svc, err := retention.NewService(retention.ServiceOptions{Runner: runner})
		if err != nil {
			t.Error(err)
			return
		}
		svcMu.Lock()
		services[n] = svc
		svcMu.Unlock()
	}
	for _, n := range shards.Numbers() {
		attach(n)
	}
	service := func(n int) *retention.Manager {
		svcMu.Lock()
		defer svcMu.Unlock()
		return services[n]
	}
	mover, err := cluster.NewNode(cluster.NodeOptions{Node: id, Owner: owner, Shards: shards, Retention: rcfg, Version: "test",
		Holder: func(n int) (backup.Holder, bool) { svc := service(n); return svc, svc != nil },
		Attach: attach,
		Detach: func(n int) {
			svcMu.Lock()
			delete(services, n)
			svcMu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	rt, err := router.New(router.Options{Node: id, Secret: secret, View: view, Shards: shards, Owner: owner,
		Retention: func(n int) retention.Service {
			if svc := service(n); svc != nil {
				return svc
			}
			return nil
		},
		Mover:   mover,
		Metrics: router.NewMetrics(reg, func() int { return len(owner.Owned()) }), RequestTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	ah, err := api.New(api.Options{Cluster: rt, Pause: &cluster.Pause{Client: c, Keys: keys}, AdminToken: adminToken, Registry: reg,
		ShardBackups: &shardBackups{shards: shards, service: service, path: filepath.Join(dir, "backups"), audit: rcfg.AuditPath}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(router.MoveStepsPath, rt.MoveSteps())
	mux.Handle("/", ah)
	h = mux
	n.srv, n.owner, n.reg = srv, owner, reg
	stopped := false
	n.stop = func() {
		if stopped {
			return
		}
		stopped = true
		srv.Close()
		api.CollectAnswered(t, reg)
		owner.Close()
		stopWatch()
		cancel()
		if err := shards.Close(); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(n.stop)
	return n
}

// send makes one request to n, checks its answer against the description
// and its status against want.
func send(t testing.TB, n *node, method, path, body string, h http.Header, want int) []byte {
	t.Helper()
	req, err := http.NewRequest(method, n.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	api.CheckAnswer(t, req, []byte(body), resp.StatusCode, resp.Header, b)
	if resp.StatusCode != want {
		t.Errorf("%s %s through %s with %v: %d, want %d: %s", method, path, n.id, h, resp.StatusCode, want, b)
	}
	return b
}

// wantCode checks an error answer's code.
func wantCode(t testing.TB, body []byte, want api.Code) {
	t.Helper()
	var e struct {
		Code api.Code `json:"code"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Code != want {
		t.Errorf("answer %s: code %q, want %q", body, e.Code, want)
	}
}

func threadIn(shard, shards int, prefix string) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("%s%d", prefix, i); cluster.ShardOf(id, shards) == shard {
			return id
		}
	}
}

// op is one operation on a thread (T) and its message (M).
type op struct {
	method, path, body string
	admin              bool
	ok                 int
}

// threadOps are every operation on one thread, in an order that succeeds.
var threadOps = []op{
	{"GET", "/v1/threads/T", "", false, 200},
	{"PATCH", "/v1/threads/T", `{"title":"renamed"}`, false, 200},
	{"POST", "/v1/threads/T/messages", `{"id":"M","author":"u","body":"x"}`, false, 201},
	{"GET", "/v1/threads/T/messages", "", false, 200},
	{"GET", "/v1/threads/T/messages/M", "", false, 200},
	{"PUT", "/v1/threads/T/messages/M", `{"body":"y"}`, false, 200},
	{"GET", "/v1/threads/T/messages/M/versions", "", false, 200},
	{"DELETE", "/v1/threads/T/messages/M", "", false, 204},
	{"POST", "/v1/threads/T/messages/M/restore", "", false, 200},
	{"GET", "/admin/threads/T", "", true, 200},
	{"PUT", "/admin/threads/T/legal_hold", `{"legal_hold":false}`, true, 200},
	{"PUT", "/admin/threads/T/retention", `{"max_messages":5}`, true, 200},
	{"GET", "/admin/threads/T/retention", "", true, 200},
	{"DELETE", "/admin/threads/T/retention", "", true, 204},
	{"DELETE", "/v1/threads/T", "", false, 204},
	{"POST", "/v1/threads/T/restore", "", false, 200},
}

func (o op) on(tid, mid string) (string, string) {
	r := strings.NewReplacer("T", tid, "M", mid)
	return r.Replace(o.path), r.Replace(o.body)
}

func headers(admin bool, extra http.Header) http.Header {
	h := http.Header{}
	if admin {
		h.Set("Authorization", "Bearer "+adminToken)
	}
	for k, v := range extra {
		h[k] = v
	}
	return h
}

// TestClusterConformance runs every operation through cluster nodes (a
// real etcd, two nodes, two shards) and checks every answer against the
// description: served and forwarded answers, merged listings, the
// fanned-out retention routes and the cluster status; 403 to a client
// sending node headers without the secret, 421 to a node's call with a
// stale epoch, and 503 naming the shard once its owner is down.
func TestClusterConformance(t *testing.T) {
	etcd := etcdtest.Start(t)
	a, b := startTwoNodes(t, etcd)
	epoch, err := b.owner.Epoch(1)
	if err != nil {
		t.Fatal(err)
	}
	admin := headers(true, nil)
	ta, tb := threadIn(0, 2, "ta"), threadIn(1, 2, "tb")

	// Served on node-a and forwarded to node-b.
	for _, tid := range []string{ta, tb} {
		send(t, a, "POST", "/v1/threads", `{"id":"`+tid+`","title":"x","author":"u"}`, nil, 201)
		for _, o := range threadOps {
			path, body := o.on(tid, "m-"+tid)
			send(t, a, o.method, path, body, headers(o.admin, nil), o.ok)
		}
	}
	send(t, b, "POST", "/v1/threads", `{"title":"generated id","author":"u"}`, nil, 201)
	// Attachments, each stored by its shard's owner: uploaded through one
	// node, read back whole and by range through either, deleted and
	// restored.
	for _, tid := range []string{ta, tb} {
		base := "/v1/threads/" + tid + "/messages/m-" + tid + "/attachments"
		var up struct {
			ID string `json:"attachment_id"`
		}
		if err := json.Unmarshal(send(t, a, "POST", base+"?filename=a.txt", "attached bytes of "+tid,
			http.Header{"Content-Type": {"text/plain"}}, 201), &up); err != nil || up.ID == "" {
			t.Fatalf("upload to %s: %q, %v", tid, up.ID, err)
		}
		send(t, b, "GET", base, "", nil, 200)
		if got := send(t, b, "GET", base+"/"+up.ID, "", nil, 200); string(got) != "attached bytes of "+tid {
			t.Errorf("download of %s's attachment: %q", tid, got)
		}
		if got := send(t, a, "GET", base+"/"+up.ID, "", http.Header{"Range": {"bytes=9-13"}}, 206); string(got) != "bytes" {
			t.Errorf("range of %s's attachment: %q", tid, got)
		}
		send(t, a, "DELETE", base+"/"+up.ID, "", nil, 204)
		send(t, b, "POST", base+"/"+up.ID+"/restore", "", nil, 200)
	}
	// A merged listing's cursor is good on any node; one no listing
	// handed out is refused, never answered with an empty page.
	var page struct {
		NextCursor string `json:"next_cursor"`
	}
	if err := json.Unmarshal(send(t, b, "GET", "/v1/threads?limit=1", "", nil, 200), &page); err != nil || page.NextCursor == "" {
		t.Fatalf("first page of one thread: cursor %q, %v", page.NextCursor, err)
	}
	send(t, a, "GET", "/v1/threads?limit=1&cursor="+page.NextCursor, "", nil, 200)
	wantCode(t, send(t, a, "GET", "/v1/threads?cursor=zzz", "", nil, 400), api.CodeInvalidCursor)
	wantCode(t, send(t, a, "GET", "/v1/threads?cursor="+ta, "", nil, 400), api.CodeInvalidCursor)
	send(t, a, "GET", "/v1/threads", "", nil, 200)
	send(t, b, "GET", "/admin/legal_holds", "", admin, 200)
	send(t, a, "GET", "/admin/retention", "", admin, 200)
	var runs router.ClusterRetention
	if err := json.Unmarshal(send(t, a, "POST", "/admin/retention/run", `{"dry_run":true}`, admin, 200), &runs); err != nil {
		t.Fatal(err)
	}
	for n, e := range runs.Shards {
		if e.Shard != n || e.Node != []string{"node-a", "node-b"}[n] || e.Code != 200 || e.Result == nil || !e.Result.DryRun {
			t.Errorf("run of shard %d: %+v", n, e)
		}
	}
	send(t, b, "POST", "/admin/retention/run?wait=false", `{"dry_run":true}`, admin, 202)
	send(t, a, "GET", "/admin/cluster", "", admin, 200)
	send(t, a, "PUT", "/admin/retention/pause", `{"paused":true}`, admin, 200)
	send(t, b, "PUT", "/admin/retention/pause", `{"paused":false}`, admin, 200)

	// A client posing as a node.
	forged := http.Header{router.HeaderEpoch: {fmt.Sprint(epoch)}, router.HeaderShard: {"1"}}
	for _, o := range threadOps {
		path, body := o.on(tb, "m-"+tb)
		wantCode(t, send(t, a, o.method, path, body, headers(o.admin, forged), 403), api.CodeNotANode)
	}
	send(t, a, "POST", "/v1/threads", `{"title":"x","author":"u"}`, forged, 403)
	send(t, b, "GET", "/v1/threads", "", headers(false, http.Header{router.HeaderSecret: {"wrong-secret-0123456789"}}), 403)

	// A node's call with a stale epoch.
	stale := http.Header{router.HeaderSecret: {secret}, router.HeaderEpoch: {fmt.Sprint(epoch - 1)}, router.HeaderNode: {"node-a"}}
	for _, o := range threadOps {
		path, body := o.on(tb, "m-"+tb)
		wantCode(t, send(t, b, o.method, path, body, headers(o.admin, stale), 421), api.CodeMisdirected)
	}
	send(t, b, "POST", "/v1/threads", `{"id":"`+threadIn(1, 2, "new")+`","title":"x","author":"u"}`, stale, 421)
	staleShard := headers(true, stale)
	staleShard.Set(router.HeaderShard, "1")
	send(t, b, "GET", "/v1/threads", "", staleShard, 421)
	send(t, b, "GET", "/admin/legal_holds", "", staleShard, 421)
	send(t, b, "GET", "/admin/retention", "", staleShard, 421)
	send(t, b, "POST", "/admin/retention/run", `{"dry_run":true}`, staleShard, 421)

	// node-b is gone: its shard has no owner.
	b.stop()
	for _, o := range threadOps {
		path, body := o.on(tb, "m-"+tb)
		got := send(t, a, o.method, path, body, headers(o.admin, nil), 503)
		if !strings.Contains(string(got), "shard 1") {
			t.Errorf("%s %s: %s does not name the shard", o.method, path, got)
		}
		wantCode(t, got, api.CodeShardUnavailable)
	}
	send(t, a, "POST", "/v1/threads", `{"id":"`+threadIn(1, 2, "new")+`","title":"x","author":"u"}`, nil, 503)
	var status router.ClusterRetention
	if err := json.Unmarshal(send(t, a, "GET", "/admin/retention", "", admin, 200), &status); err != nil {
		t.Fatal(err)
	}
	if s := status.Shards; len(s) != 2 || s[0].Code != 200 || s[0].Status == nil || s[1].Code != 503 ||
		s[1].Status != nil || !strings.Contains(s[1].Error, "shard 1") {
		t.Errorf("retention status with node-b down: %+v", s)
	}
	wantCode(t, send(t, a, "GET", "/v1/threads", "", nil, 503), api.CodeShardUnavailable)
	wantCode(t, send(t, a, "GET", "/admin/legal_holds", "", admin, 503), api.CodeShardUnavailable)
	send(t, a, "GET", "/v1/threads/"+ta, "", nil, 200)
	// A cluster without sealing has no keys to destroy: subject erasure
	// answers as a plain single node does.
	wantCode(t, send(t, a, "POST", "/admin/erasures", `{"author":"u"}`, admin, 409), api.CodeSealingDisabled)
}

// counter reads a counter of n's registry.
func (n *node) counter(t *testing.T, name, label, value string) float64 {
	t.Helper()
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A node forwarding with an epoch that has become stale (its view missed
// the owner's new ownership) gets 421 from the owner, reads the cluster's
// state from etcd and retries once: the client gets the owner's answer.
func TestClusterRetriesAStaleEpochOnce(t *testing.T) {
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	keys := cluster.Keys{Name: "chat"}
	if err := cluster.CreateCluster(ctx, etcd.Client(t), keys, 2, []string{"node-a", "node-b"}); err != nil {
		t.Fatal(err)
	}
	b := startNode(t, etcd, "node-b")
	epoch, err := b.owner.WaitOwned(ctx, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	a := startNodeWith(t, etcd, "node-a", false, 0) // reads etcd once, then only when it asks
	tb := threadIn(1, 2, "tb")
	send(t, a, "POST", "/v1/threads", `{"id":"`+tb+`","title":"x","author":"u"}`, nil, 201)

	// etcd ends node-b's ownership (as when its lease runs out); node-b
	// takes the shard again with a larger epoch, which node-a has not seen.
	resp, err := etcd.DirectClient(t).Get(ctx, keys.ShardOwner(1))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("owner key: %v", err)
	}
	etcd.Revoke(t, clientv3.LeaseID(resp.Kvs[0].Lease))
	if _, err := b.owner.WaitOwned(ctx, 1, epoch); err != nil {
		t.Fatal(err)
	}
	send(t, a, "POST", "/v1/threads/"+tb+"/messages", `{"id":"m1","author":"u","body":"after"}`, nil, 201)
	if got := a.counter(t, "progressdb_cluster_forwarded_total", "result", "retried"); got != 1 {
		t.Fatalf("forwarded_total{result=retried} = %v, want 1", got)
	}
	if got := a.counter(t, "progressdb_cluster_forwarded_total", "result", "ok"); got != 2 {
		t.Fatalf("forwarded_total{result=ok} = %v, want 2", got)
	}

	// Again for an upload, whose body is streamed, not held: the owner
	// refuses it before reading it (the forward waits for its 100
	// Continue), so the whole file goes to the retry.
	if epoch, err = b.owner.Epoch(1); err != nil {
		t.Fatal(err)
	}
	if resp, err = etcd.DirectClient(t).Get(ctx, keys.ShardOwner(1)); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("owner key: %v", err)
	}
	etcd.Revoke(t, clientv3.LeaseID(resp.Kvs[0].Lease))
	if _, err := b.owner.WaitOwned(ctx, 1, epoch); err != nil {
		t.Fatal(err)
	}
	base := "/v1/threads/" + tb + "/messages/m1/attachments"
	var up struct {
		ID string `json:"attachment_id"`
	}
	if err := json.Unmarshal(send(t, a, "POST", base, "a file sent twice", nil, 201), &up); err != nil || up.ID == "" {
		t.Fatal(err)
	}
	if got := send(t, b, "GET", base+"/"+up.ID, "", nil, 200); string(got) != "a file sent twice" {
		t.Fatalf("the retried upload stored %q", got)
	}
	if got := a.counter(t, "progressdb_cluster_forwarded_total", "result", "retried"); got != 2 {
		t.Fatalf("forwarded_total{result=retried} = %v, want 2", got)
	}
}

// An owner that takes connections but answers nothing (a frozen process)
// costs a request the node's request timeout, then 503 naming the shard;
// a listing too.
func TestClusterFrozenOwner(t *testing.T) {
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.CreateCluster(ctx, etcd.Client(t), cluster.Keys{Name: "chat"}, 2, []string{"node-a", "node-b"}); err != nil {
		t.Fatal(err)
	}
	a, b := startNodeWith(t, etcd, "node-a", true, 300*time.Millisecond), startNode(t, etcd, "node-b")
	if _, err := b.owner.WaitOwned(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.owner.WaitOwned(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	tb := threadIn(1, 2, "tb")
	send(t, a, "POST", "/v1/threads", `{"id":"`+tb+`","title":"x","author":"u"}`, nil, 201)
	b.frozen.Store(true)
	for _, path := range []string{"/v1/threads/" + tb, "/v1/threads"} {
		if got := send(t, a, "GET", path, "", nil, 503); !strings.Contains(string(got), "shard 1") ||
			!strings.Contains(string(got), "did not answer in time") {
			t.Errorf("GET %s with its owner frozen: %s", path, got)
		}
	}
	b.frozen.Store(false)
	send(t, a, "GET", "/v1/threads/"+tb, "", nil, 200)

	// etcd out of reach: the cluster's state cannot be read.
	etcd.Partition()
	if got := send(t, a, "GET", "/admin/cluster", "", headers(true, nil), 503); !strings.Contains(string(got), "cluster state unreadable") {
		t.Errorf("GET /admin/cluster without etcd: %s", got)
	}
}

// A node that holds a shard but has lost its ownership (its lease ended
// and it has not taken it again) goes on serving the shard's reads and
// answers its writes 503 naming the shard; other nodes answer 503 for it.
func TestClusterWritesWaitForOwnership(t *testing.T) {
	etcd := etcdtest.Start(t)
	a, b := startTwoNodes(t, etcd)
	tb := threadIn(1, 2, "tb")
	send(t, a, "POST", "/v1/threads", `{"id":"`+tb+`","title":"x","author":"u"}`, nil, 201)
	b.owner.Close() // gives up its ownerships; its HTTP server goes on
	send(t, b, "GET", "/v1/threads/"+tb, "", nil, 200)
	for _, o := range threadOps[1:2] {
		path, body := o.on(tb, "m1")
		if got := send(t, b, o.method, path, body, nil, 503); !strings.Contains(string(got), "shard 1") {
			t.Errorf("a write without ownership: %s", got)
		}
	}
	if got := send(t, a, "GET", "/v1/threads/"+tb, "", nil, 503); !strings.Contains(string(got), "shard 1") {
		t.Errorf("through another node: %s", got)
	}
}

// BenchmarkClusterForwarding: the cost of forwarding, a thread read asked
// of the node that owns its shard against the same read asked of another
// node (two nodes on loopback, one etcd, in one process).
//
//	go test -run '^$' -bench ClusterForwarding -benchtime 3s ./server/internal/api
func BenchmarkClusterForwarding(b *testing.B) {
	etcd := etcdtest.Start(b)
	na, nb := startTwoNodes(b, etcd)
	tb := threadIn(1, 2, "tb")
	send(b, na, "POST", "/v1/threads", `{"id":"`+tb+`","title":"x","author":"u"}`, nil, 201)
	send(b, na, "POST", "/v1/threads/"+tb+"/messages", `{"author":"u","body":"hello"}`, nil, 201)
	for _, c := range []struct {
		name string
		via  *node
	}{{"owner", nb}, {"forwarded", na}} {
		b.Run(c.name, func(b *testing.B) {
			url := c.via.srv.URL + "/v1/threads/" + tb + "/messages"
			for b.Loop() {
				resp, err := http.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}

// While a shard is frozen for a move, its reads go on through every node
// and its writes answer 503 naming it with Retry-After; once thawed, they
// land again.
func TestClusterShardMovingRefusesWrites(t *testing.T) {
	etcd := etcdtest.Start(t)
	a, b := startTwoNodes(t, etcd)
	tb := threadIn(1, 2, "tb")
	send(t, a, "POST", "/v1/threads", `{"id":"`+tb+`","title":"x","author":"u"}`, nil, 201)
	b.owner.Freeze(1)
	for _, n := range []*node{a, b} {
		send(t, n, "GET", "/v1/threads/"+tb, "", nil, 200)
		send(t, n, "GET", "/v1/threads", "", nil, 200)
		req, err := http.NewRequest("POST", n.srv.URL+"/v1/threads/"+tb+"/messages", strings.NewReader(`{"author":"u","body":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		api.CheckAnswer(t, req, []byte(`{"author":"u","body":"x"}`), resp.StatusCode, resp.Header, body)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "shard 1") ||
			!strings.Contains(string(body), "moved") {
			t.Errorf("a write through %s while shard 1 moves: %d %q %s", n.id, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	b.owner.Thaw(1)
	send(t, a, "POST", "/v1/threads/"+tb+"/messages", `{"author":"u","body":"x"}`, nil, 201)
}

// TestClusterMoveShard moves a shard between two running nodes through
// POST /admin/cluster/shards/{n}/move, asked of the shard's home: the
// request goes to the target, which pulls the shard from its home over
// the nodes' move steps; every thread and message is then served by the
// target through both nodes, writes go on, and the home holds it no more.
// A move to the node that holds the shard is 400, one while another move
// of the shard is under way 409, one to a node not running 503.
func TestClusterMoveShard(t *testing.T) {
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := etcd.Client(t)
	keys := cluster.Keys{Name: "chat"}
	a, b := startTwoNodes(t, etcd)
	admin := headers(true, nil)
	ta := threadIn(0, 2, "ta")
	send(t, a, "POST", "/v1/threads", `{"id":"`+ta+`","title":"x","author":"u"}`, nil, 201)
	for i := range 5 {
		via := []*node{a, b}[i%2]
		send(t, via, "POST", "/v1/threads/"+ta+"/messages", fmt.Sprintf(`{"id":"m%d","author":"u","body":"x"}`, i), nil, 201)
	}

	var res cluster.MoveResult
	body := send(t, a, "POST", "/admin/cluster/shards/0/move", `{"to":"node-b"}`, admin, 200)
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	if res.From != "node-a" || res.To != "node-b" || !res.Removed || res.Threads != 1 || res.Messages != 5 {
		t.Fatalf("move: %s", body)
	}
	if e, err := b.owner.WaitOwned(ctx, 0, 0); err != nil || e != res.Epoch {
		t.Fatalf("node-b owns shard 0 with %d, %v; want %d", e, err, res.Epoch)
	}
	for i, via := range []*node{a, b} {
		var page struct {
			Messages []json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(send(t, via, "GET", "/v1/threads/"+ta+"/messages", "", nil, 200), &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Messages) != 5+i {
			t.Errorf("through %s after the move: %d messages, want %d", via.id, len(page.Messages), 5+i)
		}
		send(t, via, "POST", "/v1/threads/"+ta+"/messages", `{"author":"u","body":"after"}`, nil, 201)
	}
	var st struct {
		Shards []struct {
			N     int    `json:"n"`
			Home  string `json:"home"`
			Owner string `json:"owner"`
		} `json:"shards"`
	}
	if err := json.Unmarshal(send(t, a, "GET", "/admin/cluster", "", admin, 200), &st); err != nil {
		t.Fatal(err)
	}
	if st.Shards[0].Home != "node-b" {
		t.Errorf("cluster status after the move: %+v", st.Shards)
	}

	send(t, a, "POST", "/admin/cluster/shards/0/move", `{"to":"node-b"}`, admin, 400)
	send(t, a, "POST", "/admin/cluster/shards/0/move", `{}`, admin, 400)
	send(t, a, "POST", "/admin/cluster/shards/9/move", `{"to":"node-a"}`, admin, 400)
	send(t, a, "POST", "/admin/cluster/shards/0/move", `{"to":"node-z"}`, admin, 503)
	if _, err := c.Put(ctx, keys.ShardMove(1), `{"from":"node-b","to":"node-a"}`); err != nil {
		t.Fatal(err)
	}
	send(t, b, "POST", "/admin/cluster/shards/1/move", `{"to":"node-a"}`, admin, 409)
	// The move refused left shard 1 serving on node-b.
	tb := threadIn(1, 2, "tb")
	send(t, a, "POST", "/v1/threads", `{"id":"`+tb+`","title":"x","author":"u"}`, nil, 201)
}

// A move whose home does not answer (a frozen process) fails with 503
// once a node's call times out, and leaves the shard where it was: no
// move key, and writes go on once the home answers again.
func TestClusterMoveShardHomeFrozen(t *testing.T) {
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := etcd.Client(t)
	keys := cluster.Keys{Name: "chat"}
	if err := cluster.CreateCluster(ctx, c, keys, 2, []string{"node-a", "node-b"}); err != nil {
		t.Fatal(err)
	}
	a := startNodeWith(t, etcd, "node-a", true, time.Second)
	b := startNodeWith(t, etcd, "node-b", true, time.Second)
	if _, err := a.owner.WaitOwned(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	ta := threadIn(0, 2, "ta")
	send(t, b, "POST", "/v1/threads", `{"id":"`+ta+`","title":"x","author":"u"}`, nil, 201)
	a.frozen.Store(true)
	if got := send(t, b, "POST", "/admin/cluster/shards/0/move", `{"to":"node-b"}`, headers(true, nil), 503); !strings.Contains(string(got), "stays on node-a") {
		t.Errorf("move from a frozen home: %s", got)
	}
	a.frozen.Store(false)
	if r, err := c.Get(ctx, keys.ShardMove(0), clientv3.WithCountOnly()); err != nil || r.Count != 0 {
		t.Fatalf("move key left: %v, %v", r, err)
	}
	send(t, b, "POST", "/v1/threads/"+ta+"/messages", `{"author":"u","body":"x"}`, nil, 201)
}
