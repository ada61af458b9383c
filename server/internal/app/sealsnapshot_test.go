package app

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// TestSealedReplicaDownDuringPurgeCatchesUp: a replica down while its
// shard purges a sealed thread comes back by a snapshot carrying the
// leader's key store (the purge dropped the log it lacked). Its node's
// key store and data folders of the shard then hold neither the
// thread's keys nor its wrapped DEK nor its records; its key store
// holds the leader's keys and keeps its own identity, bound to the
// database the snapshot made a copy of the leader's; and
// its copy of the shard opens with that key store, every thread kept
// readable, a write after the purge included.
func TestSealedReplicaDownDuringPurgeCatchesUp(t *testing.T) {
	t.Parallel()
	etcd, nodes := startSealedReplicated(t, "node-a", "node-b", "node-c")
	purged := "t00"
	shard := cluster.ShardOf(purged, testShards)
	ids := []string{purged}
	for i := 1; len(ids) < 3; i++ {
		if id := fmt.Sprintf("t%02d", i); cluster.ShardOf(id, testShards) == shard {
			ids = append(ids, id)
		}
	}
	for i, id := range ids {
		sealedThread(t, nodes[i%2], id)
	}
	// node-c holds the thread's key when it stops.
	c := nodes[2]
	readSealed(t, c, purged)
	c.shutdown()
	wrapped := keyEntry(t, c, shard, purged)
	keysDir := cluster.ShardKeystorePath(filepath.Join(c.dir, "keys"), shard)
	dataDir := cluster.ShardDBPath(filepath.Join(c.dir, "data"), shard)
	storetest.RequireAll(t, keysDir, "k:"+purged+":", wrapped)
	before := shardIdentity(t, c, shard)

	if code, body := retryCall(t, http.MethodDelete, nodes[0].url()+"/v1/threads/"+purged, "", nil); code != http.StatusNoContent {
		t.Fatalf("delete %s: %d %s", purged, code, body)
	}
	time.Sleep(1100 * time.Millisecond)
	if res := runShard(t, nodes[1], shard); res.Result.Purged < 1 {
		t.Fatalf("shard %d's run purged nothing: %+v", shard, res.Result)
	}
	appendSealed(t, nodes[0], ids[1]) // a write after the purge, past the log node-c has

	c = startSealedNode(t, etcd, c.id, c.dir)
	nodes[2] = c
	waitCaughtUp(t, etcd, shard)
	// Its key store erases in the background what its leader's owed.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		keys, err := storetest.Scan(keysDir, []string{"k:" + purged + ":", wrapped})
		if err != nil {
			t.Fatal(err)
		}
		if len(keys.Found()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-c's key store still holds %v", keys.Found())
		}
	}
	for _, n := range nodes {
		n.shutdown()
	}
	storetest.RequireNone(t, dataDir, "thread:"+purged+":")
	storetest.RequireNone(t, keysDir, "k:"+purged+":", wrapped)
	// Its database is a copy of its leader's (the same identity, as any
	// replica's after a snapshot), its key store still its own, bound to
	// that copy.
	after := shardIdentity(t, c, shard)
	copied := false
	for _, n := range nodes[:2] {
		other := shardIdentity(t, n, shard)
		if other.keyStore == before.keyStore || other.database == before.database {
			t.Fatalf("%s and node-c shared identities of shard %d before: %+v %+v", n.id, shard, other, before)
		}
		copied = copied || after.database == other.database
	}
	if after.keyStore != before.keyStore || !copied {
		t.Errorf("node-c's identities of shard %d were %+v, and are %+v after the snapshot, a copy of no leader's", shard, before, after)
	}
	if got, want := keyEntries(t, keysDir), keyEntries(t, cluster.ShardKeystorePath(filepath.Join(nodes[0].dir, "keys"), shard)); !slices.Equal(got, want) {
		t.Errorf("node-c's keys of shard %d %q, node-a's %q", shard, got, want)
	}
	cfg := config.Config{DBPath: dataDir, KeystorePath: keysDir, KEK: sealKEK()}
	st, err := OpenStore(context.Background(), cfg, testLogger(t), store.Options{}, KeepPlain)
	if err != nil {
		t.Fatalf("node-c's copy of shard %d with its key store: %v", shard, err)
	}
	defer st.Close()
	for _, id := range ids[1:] {
		th, err := st.GetThread(context.Background(), id)
		if err != nil || th.Title != sealTitle+"-"+id {
			t.Errorf("thread %s on node-c: %+v (%v)", id, th, err)
		}
	}
	msgs, _, err := st.ListMessages(context.Background(), ids[1], store.ListOptions{})
	if err != nil || len(msgs) != 2 {
		t.Errorf("thread %s on node-c: %+v (%v), want its two messages", ids[1], msgs, err)
	}
	for _, m := range msgs {
		if !strings.Contains(string(m.Body), sealBody+"-"+ids[1]) {
			t.Errorf("a message of %s on node-c: %+v", ids[1], m)
		}
	}
}

// waitCaughtUp waits until every replica of shard n reports the same
// applied index, none lagging.
func waitCaughtUp(t *testing.T, etcd *etcdtest.Server, n int) {
	t.Helper()
	c := etcd.Client(t)
	var last []cluster.ReplicaStatus
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		st, err := cluster.ReadStatus(context.Background(), c, cluster.Keys{Name: "chat"})
		if err == nil && n < len(st.Shards) {
			last = st.Shards[n].Replicas
			if caughtUp(last) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("shard %d's replicas never caught up: %+v (%v)", n, last, err)
		}
	}
}

func caughtUp(rs []cluster.ReplicaStatus) bool {
	if len(rs) == 0 {
		return false
	}
	for _, r := range rs {
		if r.Role == cluster.RoleUnknown || r.Lag != 0 || r.Applied == 0 || r.Applied != rs[0].Applied {
			return false
		}
	}
	return true
}

// identityOfShard is a replica's binding of its shard: its database's
// identity, and its key store's identity and the database it names
// (which shardIdentity checks is its database).
type identityOfShard struct {
	database, keyStore, keyStoreDB string
}

// shardIdentity reads a stopped node's identities of shard n.
func shardIdentity(t *testing.T, node *testNode, n int) identityOfShard {
	t.Helper()
	db, err := store.FolderDatabaseID(cluster.ShardDBPath(filepath.Join(node.dir, "data"), n))
	if err != nil {
		t.Fatal(err)
	}
	id := identityOfShard{database: db}
	ks, err := pebble.Open(cluster.ShardKeystorePath(filepath.Join(node.dir, "keys"), n), &pebble.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Close()
	for key, dst := range map[string]*string{"ks:id": &id.keyStore, "ks:db": &id.keyStoreDB} {
		v, closer, err := ks.Get([]byte(key))
		if err != nil {
			t.Fatalf("%s's %s of shard %d: %v", node.id, key, n, err)
		}
		*dst = string(v)
		_ = closer.Close()
	}
	if id.database == "" || id.keyStoreDB != id.database {
		t.Fatalf("%s's key store of shard %d is bound to %q, its database is %q", node.id, n, id.keyStoreDB, id.database)
	}
	return id
}

// keyEntries lists a stopped key store's keys ("k:" entries) with their
// values: the keys it holds, as every replica of a group holds them.
func keyEntries(t *testing.T, dir string) []string {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte("k:"), UpperBound: []byte("k;")})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for valid := it.First(); valid; valid = it.Next() {
		out = append(out, string(it.Key())+"="+fmt.Sprintf("%x", it.Value()))
	}
	if len(out) == 0 {
		t.Fatalf("no key in %s", dir)
	}
	return out
}
