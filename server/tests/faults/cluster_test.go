package faults

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
)

const clusterShards = 3

// clusterNodeEnv is node id's environment over the etcd at endpoints
// (comma-separated), with its data under dir. The nodes talk with mutual
// TLS (spec §14), each with a certificate of the suite's cluster CA
// naming 127.0.0.1, so that every cluster test runs with it on.
func clusterNodeEnv(t testing.TB, endpoints, id, dir string) envVars {
	return envVars{
		"PROGRESSDB_DB_PATH":           filepath.Join(dir, "data"),
		"PROGRESSDB_ADMIN_TOKEN":       adminToken,
		"PROGRESSDB_CLUSTER_ETCD":      endpoints,
		"PROGRESSDB_NODE_ID":           id,
		"PROGRESSDB_CLUSTER_SECRET":    "0123456789abcdef-faults",
		"PROGRESSDB_CLUSTER_SHARDS":    fmt.Sprint(clusterShards),
		"PROGRESSDB_CLUSTER_LEASE_TTL": "3s",
	}.with(nodeTLS(t, id, dir)...)
}

// startClusterNode starts `progressdb serve` as a cluster node on a free
// loopback port, advertised as such, and waits until it answers /healthz.
func startClusterNode(t testing.TB, env envVars) *server {
	t.Helper()
	return startClusterNodeAt(t, env, freeAddr(t))
}

// startClusterNodeAt is startClusterNode on addr: a node restarted where
// it was, as a deployment restarts it.
func startClusterNodeAt(t testing.TB, env envVars, addr string) *server {
	t.Helper()
	s := launchClusterNode(t, env, addr)
	waitNodeUp(t, s)
	return s
}

// launchClusterNode starts `progressdb serve` as a cluster node on addr
// without waiting for it: a node waits for the cluster's creation before
// it answers.
func launchClusterNode(t testing.TB, env envVars, addr string) *server {
	t.Helper()
	return &server{proc: start(t, env.with("PROGRESSDB_ADDR", addr, "PROGRESSDB_ADVERTISE_URL", "https://"+addr), "serve"),
		url: "https://" + addr}
}

// waitNodeUp waits until the node s answers /healthz.
func waitNodeUp(t testing.TB, s *server) {
	t.Helper()
	waitFor(t, time.Minute, "the node to answer /healthz", func() bool {
		if s.exited() {
			t.Fatalf("node exited with status %d\n%s", s.code, s.output())
		}
		resp, err := httpClient.Get(s.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// clusterState is GET /admin/cluster through s.
func clusterState(t testing.TB, s *server) cluster.Status {
	t.Helper()
	var st cluster.Status
	s.mustCall(t, "GET", "/admin/cluster", nil, adminToken, http.StatusOK, &st)
	return st
}

func ownedShards(st cluster.Status) int {
	n := 0
	for _, s := range st.Shards {
		if s.State == cluster.ShardOwned {
			n++
		}
	}
	return n
}

// listAll pages through GET /v1/threads on s, 4 at a time.
func listAll(t testing.TB, s *server) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for range 100 {
		var page struct {
			Threads []struct {
				ID string `json:"id"`
			} `json:"threads"`
			NextCursor string `json:"next_cursor"`
		}
		s.mustCall(t, "GET", "/v1/threads?limit=4&cursor="+cursor, nil, "", http.StatusOK, &page)
		for _, th := range page.Threads {
			ids = append(ids, th.ID)
		}
		if cursor = page.NextCursor; cursor == "" {
			return ids
		}
	}
	t.Fatal("the listing does not end")
	return nil
}

// TestFaultClusterNodeKilled runs three node processes of the built binary
// over an etcd: writes through any node are read back through every node
// and listed in order by every node. A node killed with SIGKILL leaves its
// shard answering 503 naming it, and the listing 503, while the other
// shards serve; once its registration has expired it restarts on its
// folder, takes its shard again, and nothing acknowledged is lost.
func TestFaultClusterNodeKilled(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	envs := clusterEnvs(t, strings.Join(etcd.Endpoints(), ","))
	nodes := startNodes(t, envs)

	var threads []string
	for i := range 24 {
		tid := fmt.Sprintf("c%02d", i)
		via := nodes[i%len(nodes)]
		via.mustCall(t, "POST", "/v1/threads", map[string]string{"id": tid, "title": "t", "author": "a"}, "", http.StatusCreated, nil)
		via.mustCall(t, "POST", "/v1/threads/"+tid+"/messages", map[string]any{"author": "a", "body": tid}, "", http.StatusCreated, nil)
		threads = append(threads, tid)
	}
	for _, n := range nodes {
		if got := listAll(t, n); !slices.Equal(got, threads) {
			t.Fatalf("listing through %s = %v, want %v", n.url, got, threads)
		}
	}

	// node-3 holds shard 2 (the shards are spread round robin).
	before := clusterState(t, nodes[0]).Shards[2].Epoch
	nodes[2].kill()
	var inDead, inLive string
	for _, tid := range threads {
		switch cluster.ShardOf(tid, clusterShards) {
		case 2:
			inDead = tid
		case 0:
			inLive = tid
		}
	}
	for _, n := range nodes[:2] {
		code, body := n.call(t, "GET", "/v1/threads/"+inDead+"/messages", nil, "")
		if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "shard 2") {
			t.Fatalf("a thread of the killed node's shard: %d %s", code, body)
		}
		code, body = n.call(t, "GET", "/v1/threads", nil, "")
		if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "shard 2") {
			t.Fatalf("the listing with a shard down: %d %s", code, body)
		}
		n.mustCall(t, "GET", "/v1/threads/"+inLive+"/messages", nil, "", http.StatusOK, nil)
	}

	// Its registration and its ownership expire with their leases (two
	// leases, expiring apart); then it starts again.
	waitFor(t, time.Minute, "the killed node's registration and ownership to expire", func() bool {
		st := clusterState(t, nodes[0])
		for _, n := range st.Nodes {
			if n.ID == "node-3" {
				return !n.Alive && st.Shards[2].State == cluster.ShardUnavailable
			}
		}
		return false
	})
	nodes[2] = startClusterNode(t, envs["node-3"])
	waitFor(t, time.Minute, "the restarted node to own its shard", func() bool { return ownedShards(clusterState(t, nodes[1])) == clusterShards })
	if after := clusterState(t, nodes[1]).Shards[2].Epoch; after <= before {
		t.Fatalf("shard 2 taken again with epoch %d, not above %d", after, before)
	}
	for _, n := range nodes {
		for _, tid := range threads {
			var page struct {
				Messages []struct {
					Body string `json:"body"`
				} `json:"messages"`
			}
			n.mustCall(t, "GET", "/v1/threads/"+tid+"/messages", nil, "", http.StatusOK, &page)
			if len(page.Messages) != 1 || page.Messages[0].Body != tid {
				t.Fatalf("thread %s through %s after the restart: %+v", tid, n.url, page)
			}
		}
		if got := listAll(t, n); !slices.Equal(got, threads) {
			t.Fatalf("listing through %s after the restart = %v", n.url, got)
		}
	}
	for _, n := range nodes {
		if code := n.stop(t); code != 0 {
			t.Fatalf("node exit status %d after SIGTERM\n%s", code, n.output())
		}
	}
}
