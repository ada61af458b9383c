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
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// TestFaultReplicatedReplicaDownDuringPurge runs three node processes
// created with three replicas per shard and a one-second retention
// period. A thread of shard 0 whose title and bodies are markers is
// soft-deleted, a node following shard 0 is killed with SIGKILL, and
// retention runs on every shard through a live node while it is down.
// The killed node starts again on its folder and applies as far as the
// others (the purge from the leader's log or a snapshot); a thread kept
// beside the purged one reads back through every node; once the nodes
// stop, no file under any node's folder (data, Raft log, audit) holds a
// marker.
func TestFaultReplicatedReplicaDownDuringPurge(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	direct := etcd.DirectClient(t)
	envs := clusterEnvs(t, strings.Join(etcd.Endpoints(), ","))
	for id, env := range envs {
		envs[id] = env.with(
			"PROGRESSDB_RETENTION_AUDIT_PATH", filepath.Join(nodeDir(env), "audit"),
			"PROGRESSDB_RETENTION_ENABLED", "true",
			"PROGRESSDB_RETENTION_PERIOD", "1s",
			"PROGRESSDB_RETENTION_MESSAGE_PERIOD", "1s",
			"PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD", "true",
			"PROGRESSDB_RETENTION_CRON", "0 2 1 1 *",
			"PROGRESSDB_RETENTION_RUN_MISSED", "false",
		)
	}
	nodes := startReplicatedNodes(t, envs, direct)

	purged, kept := threadInShard(0, 1), threadInShard(0, 2)
	markers := []string{marker(purged, "title")}
	nodes[0].mustCall(t, "POST", "/v1/threads", map[string]string{"id": purged, "title": markers[0], "author": "a"}, "", http.StatusCreated, nil)
	nodes[1].mustCall(t, "POST", "/v1/threads", map[string]string{"id": kept, "title": "kept", "author": "a"}, "", http.StatusCreated, nil)
	for i := range 20 {
		body := marker(fmt.Sprintf("%s-%02d", purged, i), "body")
		markers = append(markers, body)
		nodes[i%len(nodes)].mustCall(t, "POST", "/v1/threads/"+purged+"/messages", map[string]any{"author": "a", "body": body}, "", http.StatusCreated, nil)
		nodes[i%len(nodes)].mustCall(t, "POST", "/v1/threads/"+kept+"/messages", map[string]any{"author": "a", "body": fmt.Sprintf("kept-%02d", i)}, "", http.StatusCreated, nil)
	}
	// Every replica holds the markers before one goes down: the purge
	// has to reach files that have them.
	waitFor(t, time.Minute, "every replica of shard 0 to apply as far as the others", func() bool { return sameApplied(nodes, 0) })
	nodes[2].mustCall(t, "DELETE", "/v1/threads/"+purged, nil, "", http.StatusNoContent, nil)

	leader := waitLeaderRecord(t, direct, 0, func(cluster.Leader) bool { return true })
	down := (slices.Index(clusterIDs, leader.Node) + 1) % len(nodes)
	live := nodes[(down+1)%len(nodes)]
	nodes[down].kill()
	// The killed replica's files hold the markers: the scan at the end
	// sees what the purge must erase.
	if rep, err := storetest.Scan(nodeDir(envs[clusterIDs[down]]), markers); err != nil || len(rep.Found()) != len(markers) {
		t.Fatalf("markers in the killed replica's files before the purge: %v (%v)", rep.Found(), err)
	}
	time.Sleep(1100 * time.Millisecond) // past the period
	runAllShards(t, live)
	for _, s := range nodes {
		if s == nodes[down] {
			continue
		}
		if code, body := s.call(t, "GET", "/v1/threads/"+purged, nil, ""); code != http.StatusNotFound {
			t.Fatalf("purged thread through %s: %d %s", s.url, code, body)
		}
	}

	nodes[down] = startClusterNodeAt(t, envs[clusterIDs[down]], nodes[down].addr())
	waitFor(t, time.Minute, "the returned replica to apply as far as the others", func() bool { return sameApplied(nodes, 0) })
	for _, s := range nodes {
		if got := messageBodies(t, s, kept); len(got) != 20 {
			t.Fatalf("kept thread through %s: %d messages, want 20", s.url, len(got))
		}
	}
	for _, s := range nodes {
		if code := s.stop(t); code != 0 {
			t.Fatalf("node exit status %d after SIGTERM\n%s", code, s.output())
		}
	}
	for _, id := range clusterIDs {
		storetest.RequireNone(t, nodeDir(envs[id]), markers...)
	}
}
