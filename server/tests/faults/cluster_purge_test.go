package faults

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/router"
)

var clusterIDs = []string{"node-1", "node-2", "node-3"}

// clusterEnvs are the three nodes' environments over the etcd at
// endpoints, each with extra set, each in a folder of its own.
func clusterEnvs(t testing.TB, endpoints string, extra ...string) map[string]envVars {
	t.Helper()
	envs := map[string]envVars{}
	for _, id := range clusterIDs {
		envs[id] = clusterNodeEnv(t, endpoints, id, t.TempDir()).with(extra...)
	}
	return envs
}

// createCluster runs `progressdb cluster create` for the three nodes.
func createCluster(t testing.TB, envs map[string]envVars) {
	t.Helper()
	if p := runCLI(t, envs["node-1"].with("PROGRESSDB_ADVERTISE_URL", "https://127.0.0.1:1"), "cluster", "create", "--nodes", strings.Join(clusterIDs, ",")); p.code != 0 {
		t.Fatalf("cluster create: %d\n%s", p.code, p.output())
	}
}

// startNodes starts the three nodes, creates the cluster (which waits
// until each node has reported what it holds) and waits until every shard
// is owned.
func startNodes(t testing.TB, envs map[string]envVars) []*server {
	t.Helper()
	nodes := make([]*server, len(clusterIDs))
	for i, id := range clusterIDs {
		nodes[i] = launchClusterNode(t, envs[id], freeAddr(t))
	}
	createCluster(t, envs)
	for _, n := range nodes {
		waitNodeUp(t, n)
	}
	waitFor(t, time.Minute, "every shard to be owned", func() bool { return ownedShards(clusterState(t, nodes[0])) == clusterShards })
	return nodes
}

// shardSite is shard n of the node whose environment is env, as a site
// the retention checks read. Its runs hold the shard's ownership, not a
// lease file.
func shardSite(env envVars, n int) site {
	return site{
		dir:   filepath.Dir(env["PROGRESSDB_DB_PATH"]),
		db:    cluster.ShardDBPath(env["PROGRESSDB_DB_PATH"], n),
		audit: cluster.ShardAuditPath(env["PROGRESSDB_RETENTION_AUDIT_PATH"], n),
	}
}

// threadInShard returns an ID in shard n, distinct for each i.
func threadInShard(n, i int) string {
	for k := 0; ; k++ {
		id := fmt.Sprintf("s%d-%d-%d", n, i, k)
		if cluster.ShardOf(id, clusterShards) == n {
			return id
		}
	}
}

// waitUnregistered waits until etcd no longer shows node id alive.
func waitUnregistered(t testing.TB, via *server, id string) {
	t.Helper()
	waitFor(t, time.Minute, id+"'s registration to expire", func() bool {
		for _, n := range clusterState(t, via).Nodes {
			if n.ID == id {
				return !n.Alive
			}
		}
		return false
	})
}

// startPurgeCluster starts etcd and three nodes whose retention purges
// slowly, with the fixture of spec seeded into shard 2 on node-3 (its home,
// round robin, and the shard node-3 reports it holds) before it starts. The shard's retention purges what its
// database holds, whatever shard the fixture's IDs hash to.
func startPurgeCluster(t *testing.T, spec fixtureSpec, rng *rand.Rand) (map[string]envVars, site, *fixture, dbState, []*server) {
	t.Helper()
	etcd := startEtcd(t)
	envs := clusterEnvs(t, etcd.endpoints())
	for id, env := range envs {
		envs[id] = env.with(
			"PROGRESSDB_RETENTION_AUDIT_PATH", filepath.Join(filepath.Dir(env["PROGRESSDB_DB_PATH"]), "audit"),
			"PROGRESSDB_RETENTION_ENABLED", "true",
			"PROGRESSDB_RETENTION_PERIOD", period,
			"PROGRESSDB_RETENTION_MESSAGE_PERIOD", period,
			"PROGRESSDB_RETENTION_CRON", "0 2 1 1 *",
			"PROGRESSDB_RETENTION_RUN_MISSED", "false",
			// Slow enough for a fault to land mid-run.
			"PROGRESSDB_RETENTION_BATCH_SIZE", "50",
			"PROGRESSDB_RETENTION_BATCH_PAUSE", "20ms",
		)
	}
	s := shardSite(envs["node-3"], 2)
	fx := seedFixture(t, s.db, spec, rng)
	before := snapshotLive(t, s.db)
	return envs, s, fx, before, startNodes(t, envs)
}

// startShardRuns starts a run on every shard through n and returns shard
// 2's run ID.
func startShardRuns(t testing.TB, n *server) string {
	t.Helper()
	var started router.ClusterRetention
	n.mustCall(t, "POST", "/admin/retention/run?wait=false", nil, adminToken, http.StatusAccepted, &started)
	runID := ""
	for _, sh := range started.Shards {
		if sh.Code != http.StatusAccepted {
			t.Fatalf("shard %d's run: %+v", sh.Shard, sh)
		}
		if sh.Shard == 2 {
			runID = sh.RunID
		}
	}
	return runID
}

// runAllShards runs retention on every shard through n until every
// shard's run completes. A shard answering 503 is asked again: a node
// just restarted owns its shard in etcd a moment before n's view of it
// and the node itself agree.
func runAllShards(t testing.TB, n *server) {
	t.Helper()
	waitFor(t, time.Minute, "a run to complete on every shard", func() bool {
		var done router.ClusterRetention
		n.mustCall(t, "POST", "/admin/retention/run", nil, adminToken, http.StatusOK, &done)
		for _, sh := range done.Shards {
			if sh.Code == http.StatusServiceUnavailable {
				t.Logf("shard %d's run: %d %s; asking again", sh.Shard, sh.Code, sh.Error)
				time.Sleep(100 * time.Millisecond)
				return false
			}
			if sh.Code != http.StatusOK || sh.Result == nil || sh.Result.Status != audit.RunCompleted {
				t.Fatalf("shard %d's run: %+v", sh.Shard, sh)
			}
		}
		return true
	})
}

// TestFaultClusterNodeKilledMidPurge kills node-3 with SIGKILL in the
// middle of its shard's purge, run on every shard through node-1. Its
// shard answers 503 naming it through the other nodes while their shards
// serve reads and writes; restarted on its folder, node-3 takes the shard
// again, the next run finishes the purge, and the shard's trail verifies
// with exactly one purged record per item (the invariants of the single
// node's crash tests, on the shard's database and trail).
func TestFaultClusterNodeKilledMidPurge(t *testing.T) {
	t.Parallel()
	spec := crashSpec()
	for i := range pick(1, max(2, suite.trials/10)) {
		t.Run(fmt.Sprintf("trial_%d", i), func(t *testing.T) {
			rng := trialRand(t, i)
			envs, s, fx, before, nodes := startPurgeCluster(t, spec, rng)

			runID := startShardRuns(t, nodes[0])
			killMidRun(t, nodes[2].proc, s, runID, len(fx.due), rng)
			crashes := &crashLog{}
			crashes.killed(t, s, fx, before, "node-3 mid-purge")

			// Shard 2 answers 503 naming it; shards 0 and 1 serve.
			for _, n := range nodes[:2] {
				for j, method := range []string{"GET", "POST"} {
					path := "/v1/threads/" + threadInShard(2, j) + "/messages"
					code, body := n.call(t, method, path, map[string]any{"author": "a", "body": "x"}, "")
					if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "shard 2") {
						t.Fatalf("%s %s through %s with shard 2's node killed: %d %s", method, path, n.url, code, body)
					}
				}
				for shard := range 2 {
					tid := threadInShard(shard, 0)
					if code, _ := n.call(t, "GET", "/v1/threads/"+tid, nil, ""); code == http.StatusNotFound {
						n.mustCall(t, "POST", "/v1/threads", map[string]string{"id": tid, "title": "t", "author": "a"}, "", http.StatusCreated, nil)
					}
					n.mustCall(t, "POST", "/v1/threads/"+tid+"/messages", map[string]any{"author": "a", "body": "x"}, "", http.StatusCreated, nil)
					n.mustCall(t, "GET", "/v1/threads/"+tid+"/messages", nil, "", http.StatusOK, nil)
				}
			}

			waitUnregistered(t, nodes[0], "node-3")
			nodes[2] = startClusterNodeAt(t, envs["node-3"], nodes[2].addr())
			waitFor(t, time.Minute, "node-3 to own its shard again", func() bool { return ownedShards(clusterState(t, nodes[0])) == clusterShards })
			runAllShards(t, nodes[1])
			for _, n := range nodes {
				if code := n.stop(t); code != 0 {
					t.Fatalf("node exit status %d after SIGTERM\n%s", code, n.output())
				}
			}
			checkInvariants(t, s, fx, before, crashes.abandoned)
			if p := runCLI(t, envVars{}, "audit", "verify", s.audit); p.code != 0 {
				t.Fatalf("progressdb audit verify %s: exit %d\n%s", s.audit, p.code, p.output())
			}
		})
	}
}
