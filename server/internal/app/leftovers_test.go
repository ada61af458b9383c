package app

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// A node stopped until its replicas were replaced elsewhere
// (PROGRESSDB_CLUSTER_DEAD_AFTER) and dropped from the sets never
// applied their removal, and at its next start the map names no replica
// of those shards on it. A message of one of its shards is purged while
// it is away. Started again, the node deletes its database and blob
// folders of every shard it no longer holds, so none of its files holds
// the purged message, and it serves every thread through routing.
func TestDroppedReplicasFoldersAreDeletedAtStart(t *testing.T) {
	t.Parallel()
	extra := []string{"PROGRESSDB_CLUSTER_DEAD_AFTER=2s", "PROGRESSDB_RETENTION_MAX_MESSAGES=1"}
	etcd, nodes := startReplicatedWith(t, []string{"node-a", "node-b", "node-c", "node-d"}, extra...)
	ctx := context.Background()
	c := etcd.Client(t)
	k := cluster.Keys{Name: "chat"}
	away := nodes[3]
	before, err := cluster.ReadMap(ctx, c, k)
	if err != nil {
		t.Fatal(err)
	}
	var held []int
	for n := range testShards {
		if _, on := before.ReplicaOn(n, away.id); on {
			held = append(held, n)
		}
	}
	if len(held) == 0 {
		t.Fatalf("%s holds no replica: %+v", away.id, before.Sets)
	}
	threads := seedShards(t, nodes[:1])
	// The purged message is older than the thread's "hi".
	shard := held[0]
	tid := "purged"
	for i := 0; cluster.ShardOf(tid, testShards) != shard; i++ {
		tid = fmt.Sprintf("purged%d", i)
	}
	secret := "purged-LF7Q2"
	seedMessages(t, nodes[0], tid, secret, "hi")
	threads = append(threads, tid)
	// Its replica has the message before it stops.
	waitFor(t, func() bool {
		st, err := cluster.ReadStatus(ctx, c, k)
		if err != nil {
			t.Fatal(err)
		}
		var applied []uint64
		for _, r := range st.Shards[shard].Replicas {
			if r.Node == away.id && r.Lag != 0 {
				return false
			}
			applied = append(applied, r.Applied)
		}
		return len(applied) == 3 && applied[0] == applied[1] && applied[1] == applied[2]
	}, away.id+"'s replica of shard "+fmt.Sprint(shard)+" caught up")
	away.shutdown()
	dataDir := filepath.Join(away.dir, "data")
	storetest.RequireAll(t, cluster.ShardDBPath(dataDir, shard), secret)

	waitMap(t, c, k, away.id+"'s replicas replaced", func(m cluster.Map) string {
		if held := m.HeldBy(away.id); len(held) != 0 {
			return fmt.Sprintf("it holds replicas of shards %v", held)
		}
		return ""
	})
	if part := runShard(t, nodes[0], shard); part.Result.Purged != 1 {
		t.Fatalf("shard %d's run purged %d: %+v", shard, part.Result.Purged, part.Result)
	}

	nodes[3] = startNodeWith(t, etcd, away.id, away.dir, replicatedEnv(away.dir, extra)...)
	checkThreads(t, nodes, threads)
	nodes[3].shutdown()
	blobs := config.DefaultAttachmentsDir(dataDir)
	for _, n := range held {
		for _, dir := range []string{cluster.ShardDBPath(dataDir, n), cluster.ShardAttachmentsDir("file://"+blobs, n)} {
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("%s's folder %s of shard %d after it left the set: %v", away.id, dir, n, err)
			}
		}
	}
	storetest.RequireNone(t, away.dir, secret)
}

// seedMessages creates thread id through via with messages of texts, in
// order.
func seedMessages(t *testing.T, via *testNode, id string, texts ...string) {
	t.Helper()
	code, body := call(t, http.MethodPost, via.url()+"/v1/threads", fmt.Sprintf(`{"id":%q,"title":"x","author":"u"}`, id), nil)
	if code != http.StatusCreated {
		t.Fatalf("create %s through %s: %d %s", id, via.id, code, body)
	}
	for _, text := range texts {
		code, body = call(t, http.MethodPost, via.url()+"/v1/threads/"+id+"/messages",
			fmt.Sprintf(`{"author":"u","body":{"text":%q}}`, text), nil)
		if code != http.StatusCreated {
			t.Fatalf("append to %s through %s: %d %s", id, via.id, code, body)
		}
	}
}
