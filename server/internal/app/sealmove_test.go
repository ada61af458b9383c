package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// TestSealedShardMovesUnderWrites: a sealed shard's replica moved to a
// node that held none of it, while writes go on through every node. The
// shard's purge dropped its log first, so the joining replica catches up
// by a snapshot carrying the leader's key store. The source's data and
// key store folders of the shard go; once its node is stopped, every
// acknowledged write reads back through every node left, and the new
// replica's copy opens with the key store it received: every
// acknowledged write there once, the purged thread's keys in none of
// its key store's files.
func TestSealedShardMovesUnderWrites(t *testing.T) {
	t.Parallel()
	etcd, nodes := startSealedReplicated(t, "node-a", "node-b", "node-c", "node-d")
	ctx := context.Background()
	c := etcd.Client(t)
	k := cluster.Keys{Name: "chat"}
	m, err := cluster.ReadMap(ctx, c, k)
	if err != nil {
		t.Fatal(err)
	}
	const shard = 0
	byID := nodesByID(nodes)
	var target *testNode
	for _, n := range nodes {
		if _, on := m.ReplicaOn(shard, n.id); !on {
			target = n
		}
	}
	source := byID[m.Homes[shard]]
	if target == nil || source == nil {
		t.Fatalf("shard %d's set %+v, home %s", shard, m.Sets[shard], m.Homes[shard])
	}
	var threads []string
	for i := 0; len(threads) < 3; i++ {
		if id := fmt.Sprintf("m%02d", i); cluster.ShardOf(id, testShards) == shard {
			threads = append(threads, id)
		}
	}
	purged := threads[0]
	for i, id := range threads {
		sealedThread(t, nodes[i], id)
	}
	if code, body := retryCall(t, http.MethodDelete, nodes[0].url()+"/v1/threads/"+purged, "", nil); code != http.StatusNoContent {
		t.Fatalf("delete %s: %d %s", purged, code, body)
	}
	time.Sleep(1100 * time.Millisecond)
	if res := runShard(t, nodes[1], shard); res.Result.Purged < 1 {
		t.Fatalf("shard %d's run purged nothing: %+v", shard, res.Result)
	}
	threads = threads[1:]

	w := startWrites(t, nodes, threads, "moved")
	w.waitAcks(t, 10)
	var via *testNode // neither end of the move
	for _, n := range nodes {
		if n != source && n != target {
			via = n
		}
	}
	// Bounded: a joining replica that never gets its snapshot holds the
	// move for good.
	client := &http.Client{Timeout: 2 * time.Minute}
	code, body, _ := sendTLS(t, client, http.MethodPost, via.url()+"/admin/cluster/shards/0/move", fmt.Sprintf(`{"to":%q}`, target.id), adminAuth)
	if code != http.StatusOK || !bytes.Contains(body, []byte(`"removed":true`)) {
		t.Fatalf("move shard %d from %s to %s: %d %s", shard, source.id, target.id, code, body)
	}
	w.waitAcks(t, 10)
	acks := w.stop(t)
	// The source's folders of the shard go, its keys with its data.
	sourceKeys := cluster.ShardKeystorePath(filepath.Join(source.dir, "keys"), shard)
	waitFor(t, func() bool {
		_, derr := os.Stat(cluster.ShardDBPath(filepath.Join(source.dir, "data"), shard))
		_, kerr := os.Stat(sourceKeys)
		return os.IsNotExist(derr) && os.IsNotExist(kerr)
	}, fmt.Sprintf("%s to delete its folders of shard %d", source.id, shard))
	source.shutdown()
	var left []*testNode
	for _, n := range nodes {
		if n != source {
			left = append(left, n)
		}
	}
	waitCaughtUp(t, etcd, shard)
	checkWrites(t, left, threads, acks)

	for _, n := range left {
		n.shutdown()
	}
	dataDir := cluster.ShardDBPath(filepath.Join(target.dir, "data"), shard)
	keysDir := cluster.ShardKeystorePath(filepath.Join(target.dir, "keys"), shard)
	storetest.RequireNone(t, keysDir, "k:"+purged+":")
	st, err := OpenStore(ctx, config.Config{DBPath: dataDir, KeystorePath: keysDir, KEK: sealKEK()}, testLogger(t), store.Options{}, KeepPlain)
	if err != nil {
		t.Fatalf("%s's copy of shard %d with its key store: %v", target.id, shard, err)
	}
	defer st.Close()
	for _, tid := range threads {
		var bodies []string
		for cursor := ""; ; {
			msgs, next, err := st.ListMessages(ctx, tid, store.ListOptions{Limit: store.MaxListLimit, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, msg := range msgs {
				if msg.Unreadable || len(msg.Body) == 0 {
					t.Fatalf("a message of %s in %s's copy: %+v", tid, target.id, msg)
				}
				var b string
				if json.Unmarshal(msg.Body, &b) == nil { // not the thread's first, an object
					bodies = append(bodies, b)
				}
			}
			if cursor = next; cursor == "" {
				break
			}
		}
		if len(acks[tid]) == 0 {
			t.Fatalf("no write to %s acknowledged", tid)
		}
		checkOnceIn(t, tid+" in "+target.id+"'s copy", bodies, acks[tid])
	}
}
