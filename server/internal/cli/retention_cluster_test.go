package cli

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/router"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// serveNode serves a cluster node of h's environment in the test process
// until the test ends, on a free loopback port it advertises, and returns
// the environment's lines for the commands that ask it.
func serveNode(t *testing.T, h *harness) []string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	node := []string{"PROGRESSDB_ADDR=" + addr, "PROGRESSDB_ADVERTISE_URL=http://" + addr}
	cfg, err := config.Load(append(append([]string{}, h.environ...), node...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Serve(ctx, cfg, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if res, err := http.Get("http://" + addr + "/healthz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return node
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the node did not answer /healthz")
		}
	}
}

// On a cluster node, retention run and retention status go through the
// node's admin API and report every shard: with a shard's owner down, that
// shard is reported with its 503 and the commands exit 1; once every shard
// is owned, every shard runs (exit 0), each in its own audit folder.
func TestClusterRetentionThroughANode(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	h := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=2", "PROGRESSDB_ADMIN_TOKEN=adm",
		"PROGRESSDB_CLUSTER_LEASE_TTL=3s")
	reportHeld(t, srv, "node-1", "node-2")
	h.mustRun("cluster", "create", "--nodes", "node-1,node-2")
	ask := &harness{t: t, dbPath: h.dbPath, environ: append(append([]string{}, h.environ...), serveNode(t, h)...)}
	waitOwned := func(n int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			st, err := cluster.ReadStatus(ctx, srv.Client(t), cluster.Keys{Name: "progressdb"})
			if err == nil && st.Shards[n].State == cluster.ShardOwned {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("shard %d not owned: %+v %v", n, st, err)
			}
		}
	}
	waitOwned(0)

	// node-2, home of shard 1, is not running.
	code, out, errOut := ask.run("retention", "run", "--dry-run")
	if code != exitFailed || !strings.Contains(out, "completed (dry run)") || !strings.Contains(out, "503: shard 1 unavailable") ||
		!strings.Contains(errOut, "not every shard") {
		t.Errorf("run with shard 1 down: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = ask.run("retention", "status")
	if code != exitFailed || !strings.Contains(out, "503: shard 1 unavailable") {
		t.Errorf("status with shard 1 down: exit %d\n%s", code, out)
	}

	node2 := &harness{t: t, dbPath: h.dbPath + "-2", environ: append(append([]string{}, h.environ...),
		"PROGRESSDB_NODE_ID=node-2", "PROGRESSDB_DB_PATH="+h.dbPath+"-2")}
	serveNode(t, node2)
	waitOwned(1)
	var runs router.ClusterRetention
	out = ask.mustRun("retention", "run", "--dry-run", "--json")
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if len(runs.Shards) != 2 {
		t.Fatalf("runs: %s", out)
	}
	for n, s := range runs.Shards {
		if s.Shard != n || s.Node != []string{"node-1", "node-2"}[n] || s.Code != 200 || s.Result == nil || !s.Result.DryRun ||
			!strings.Contains(s.Result.AuditFile, filepath.Join("shards", strconv.Itoa(n))) {
			t.Errorf("shard %d: %+v", n, s)
		}
	}
	if out := ask.mustRun("retention", "status"); !strings.Contains(out, "SHARD  NODE") || strings.Count(out, "completed") != 2 {
		t.Errorf("status:\n%s", out)
	}
}

// serveSecondNode serves node-2 of a two-shard cluster beside h's node-1
// and waits until both shards are owned.
func serveSecondNode(t *testing.T, srv *etcdtest.Server, h *harness) *harness {
	t.Helper()
	node2 := &harness{t: t, dbPath: h.dbPath + "-2", environ: append(append([]string{}, h.environ...),
		"PROGRESSDB_NODE_ID=node-2", "PROGRESSDB_DB_PATH="+h.dbPath+"-2")}
	serveNode(t, node2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		st, err := cluster.ReadStatus(ctx, srv.Client(t), cluster.Keys{Name: "progressdb"})
		if err == nil && st.Shards[0].State == cluster.ShardOwned && st.Shards[1].State == cluster.ShardOwned {
			return node2
		}
		if time.Now().After(deadline) {
			t.Fatalf("shards not owned: %+v %v", st, err)
		}
	}
}
