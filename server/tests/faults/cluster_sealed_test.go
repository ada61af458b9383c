package faults

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/pebbledir"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// clusterKEK is the sealed cluster's KEK, the same on every node (spec
// §11.1).
var clusterKEK = "base64key://" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x3c}, 32))

// sealedClusterEnvs are clusterEnvs sealing content: every node has
// clusterKEK, its key stores under <dir>/keys and its audit folders under
// <dir>/audit, outside its data folder.
func sealedClusterEnvs(t testing.TB, endpoints string, extra ...string) map[string]envVars {
	t.Helper()
	envs := clusterEnvs(t, endpoints)
	for id, env := range envs {
		dir := nodeDir(env)
		envs[id] = env.with("PROGRESSDB_KEK", clusterKEK,
			"PROGRESSDB_KEYSTORE_PATH", filepath.Join(dir, "keys"),
			"PROGRESSDB_RETENTION_AUDIT_PATH", filepath.Join(dir, "audit")).with(extra...)
	}
	return envs
}

// nodeDir is the folder that holds everything of the node whose
// environment is env: data, key stores, audit folders, TLS files.
func nodeDir(env envVars) string { return filepath.Dir(env["PROGRESSDB_DB_PATH"]) }

// startSealedCluster starts an etcd and three sealed node processes
// (sealedClusterEnvs with extra), created with `cluster create`, every
// shard owned, and returns the etcd, the nodes' environments by ID and
// the nodes in clusterIDs order.
func startSealedCluster(t testing.TB, extra ...string) (*etcdtest.Server, map[string]envVars, []*server) {
	t.Helper()
	etcd := etcdtest.Start(t)
	envs := sealedClusterEnvs(t, strings.Join(etcd.Endpoints(), ","), extra...)
	return etcd, envs, startNodes(t, envs)
}

// etcdReceiptKey reads the cluster's receipt key from etcd, as it is
// stored: wrapped by the KEK.
func etcdReceiptKey(t testing.TB, etcd *etcdtest.Server) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := etcd.Client(t).Get(ctx, cluster.Keys{Name: "progressdb"}.ReceiptKey())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the receipt key in etcd: %v, %d values", err, len(resp.Kvs))
	}
	return resp.Kvs[0].Value
}

// clusterReceiptKey reads the cluster's receipt key from etcd, unwrapped
// with clusterKEK.
func clusterReceiptKey(t testing.TB, etcd *etcdtest.Server) (wrapped, plain []byte) {
	t.Helper()
	wrapped = etcdReceiptKey(t, etcd)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kek, err := keystore.OpenKEK(ctx, clusterKEK)
	if err != nil {
		t.Fatal(err)
	}
	defer kek.Close()
	plain, err = kek.Decrypt(ctx, wrapped)
	if err != nil || len(plain) != 32 {
		t.Fatalf("the receipt key does not unwrap with the KEK into 32 bytes: %v (%d bytes)", err, len(plain))
	}
	return wrapped, plain
}

// TestFaultClusterSealed runs three sealed node processes of the built
// binary (spec §11.1): content written through any node lands sealed on
// every shard, each shard with its own key store under
// <KEYSTORE_PATH>/shards/<n>, so no title, author or body is in any file
// of any node; the cluster's one receipt key is in etcd only, wrapped by
// the KEK. A node restarted without the KEK, with another KEK, or without
// one of its shards' key stores exits 2 naming the variable; restarted as
// it was, it reads its content back.
func TestFaultClusterSealed(t *testing.T) {
	t.Parallel()
	etcd, envs, nodes := startSealedCluster(t)
	var markers []string
	threads := map[int]string{}
	for i := range 2 * clusterShards {
		tid := threadInShard(i%clusterShards, i)
		threads[i%clusterShards] = tid
		title, author, body := marker(tid, "title"), marker(tid, "author"), marker(tid, "body")
		markers = append(markers, title, author, body)
		via := nodes[(i+1)%len(nodes)] // through a node that does not own it, mostly
		via.mustCall(t, "POST", "/v1/threads", map[string]string{"id": tid, "title": title, "author": author}, "", http.StatusCreated, nil)
		via.mustCall(t, "POST", "/v1/threads/"+tid+"/messages", map[string]any{"author": author, "body": body}, "", http.StatusCreated, nil)
	}
	checkReadsBack := func(via *server) {
		t.Helper()
		for _, tid := range threads {
			_, b := via.call(t, "GET", "/v1/threads/"+tid+"/messages", nil, "")
			if !strings.Contains(string(b), marker(tid, "body")) {
				t.Fatalf("thread %s through %s: %s", tid, via.url, b)
			}
		}
	}
	checkReadsBack(nodes[0])

	// Every node's files: data, key stores and audit folders, the log
	// flushed and the stores closed first.
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.addr()
		if code := n.stop(t); code != 0 {
			t.Fatalf("node %s stopped with %d\n%s", clusterIDs[i], code, n.output())
		}
	}
	_, receiptKey := clusterReceiptKey(t, etcd)
	for i, id := range clusterIDs {
		dir := nodeDir(envs[id])
		storetest.RequireNone(t, dir, append([]string{string(receiptKey)}, markers...)...)
		// The node holds shard i (round robin), and its key store.
		if ks := cluster.ShardKeystorePath(envs[id]["PROGRESSDB_KEYSTORE_PATH"], i); !hasManifest(ks) {
			t.Errorf("node %s: no key store for shard %d at %s", id, i, ks)
		}
	}

	// What must not open exits 2 naming the variable, and creates nothing.
	env := envs["node-1"]
	refused := func(what string, env envVars, wantVar string) {
		t.Helper()
		p := launchClusterNode(t, env, addrs[0])
		if code := p.wait(t, time.Minute); code != 2 || !strings.Contains(p.stderr.String(), wantVar) {
			t.Fatalf("node-1 %s: exit %d, want 2 naming %s\n%s", what, code, wantVar, p.output())
		}
	}
	refused("without a KEK", env.with("PROGRESSDB_KEK", "", "PROGRESSDB_KEYSTORE_PATH", ""), "PROGRESSDB_KEK")
	other := "base64key://" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x3d}, 32))
	refused("with another KEK", env.with("PROGRESSDB_KEK", other), "PROGRESSDB_KEK")
	shardKeys := cluster.ShardKeystorePath(env["PROGRESSDB_KEYSTORE_PATH"], 0)
	if err := os.Rename(shardKeys, shardKeys+".away"); err != nil {
		t.Fatal(err)
	}
	refused("without shard 0's key store", env, "PROGRESSDB_KEYSTORE_PATH")
	if _, err := os.Stat(shardKeys); err == nil {
		t.Fatalf("a refused start created %s", shardKeys)
	}
	if err := os.Rename(shardKeys+".away", shardKeys); err != nil {
		t.Fatal(err)
	}

	// Restarted as they were, the nodes read every shard back.
	for i, id := range clusterIDs {
		nodes[i] = startClusterNodeAt(t, envs[id], addrs[i])
	}
	waitFor(t, time.Minute, "every shard to be owned", func() bool { return ownedShards(clusterState(t, nodes[0])) == clusterShards })
	checkReadsBack(nodes[2])
}

// hasManifest reports whether dir holds a Pebble MANIFEST file.
func hasManifest(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "MANIFEST-") {
			return true
		}
	}
	return false
}

// wrappedKeys returns the wrapped data keys in the key store at dir
// (k:<tid>:k:<num> → hmac(32) ‖ wrapped DEK), read with Pebble alone.
func wrappedKeys(t testing.TB, dir string) []string {
	t.Helper()
	db, err := pebbledir.OpenReadOnly(dir)
	if err != nil {
		t.Fatalf("open the key store %s: %v", dir, err)
	}
	defer db.Close()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte("k:"), UpperBound: []byte("k;")})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var keys []string
	for ok := it.First(); ok; ok = it.Next() {
		if strings.Contains(string(it.Key()), ":k:") && len(it.Value()) > 32 {
			keys = append(keys, string(it.Value()[32:]))
		}
	}
	return keys
}

// TestFaultClusterSealedShardMoves moves a sealed shard between two node
// processes (spec §11.1): the move's stream carries the shard's key
// store, so the new owner reads its content; the old owner's key store
// folder keeps no file holding any of the shard's wrapped keys. A backup
// of the shard through a node that does not hold it carries the key store
// too, and `progressdb restore --keystore` brings back readable content.
func TestFaultClusterSealedShardMoves(t *testing.T) {
	t.Parallel()
	_, envs, nodes := startSealedCluster(t)
	var markers []string
	var threads []string
	for i := range 3 {
		tid := threadInShard(0, i)
		threads = append(threads, tid)
		markers = append(markers, marker(tid, "title"), marker(tid, "author"), marker(tid, "body"))
		nodes[1].mustCall(t, "POST", "/v1/threads", map[string]string{"id": tid, "title": marker(tid, "title"), "author": marker(tid, "author")},
			"", http.StatusCreated, nil)
		nodes[1].mustCall(t, "POST", "/v1/threads/"+tid+"/messages", map[string]any{"author": marker(tid, "author"), "body": marker(tid, "body")},
			"", http.StatusCreated, nil)
	}
	// Shard 0's home is node-1 (round robin).
	nodes[2].mustCall(t, "POST", "/admin/cluster/shards/0/move", map[string]string{"to": "node-2"}, adminToken, http.StatusOK, nil)
	for _, tid := range threads {
		_, b := nodes[0].call(t, "GET", "/v1/threads/"+tid+"/messages", nil, "")
		if !strings.Contains(string(b), marker(tid, "body")) {
			t.Fatalf("thread %s after the move: %s", tid, b)
		}
	}

	// A backup of shard 0, asked of node-1, which forwards it to node-2.
	code, archive := nodes[0].call(t, "POST", "/admin/backups/stream?shard=0&compress=none", nil, adminToken)
	if code != http.StatusOK {
		t.Fatalf("backup of shard 0: %d %s", code, archive)
	}
	file := filepath.Join(t.TempDir(), "shard-0.tar")
	if err := os.WriteFile(file, archive, 0o600); err != nil {
		t.Fatal(err)
	}
	if rep := verifyBackup(t, file); !rep.Manifest.Sealed {
		t.Fatalf("the backup of a sealed shard holds no key store: %+v", rep.Manifest)
	}

	for i, n := range nodes {
		if code := n.stop(t); code != 0 {
			t.Fatalf("node %s stopped with %d\n%s", clusterIDs[i], code, n.output())
		}
	}
	oldKeys, newKeys := envs["node-1"]["PROGRESSDB_KEYSTORE_PATH"], envs["node-2"]["PROGRESSDB_KEYSTORE_PATH"]
	moved := wrappedKeys(t, cluster.ShardKeystorePath(newKeys, 0))
	if len(moved) < len(threads) {
		t.Fatalf("node-2's key store of shard 0 holds %d wrapped keys, want at least %d", len(moved), len(threads))
	}
	storetest.RequireNone(t, oldKeys, moved...)
	if _, err := os.Stat(cluster.ShardKeystorePath(oldKeys, 0)); !os.IsNotExist(err) {
		t.Errorf("node-1 keeps shard 0's key store folder: %v", err)
	}
	for _, id := range clusterIDs {
		storetest.RequireNone(t, nodeDir(envs[id]), markers...)
	}

	// Restored from the backup, with its key store, the shard reads.
	dir := t.TempDir()
	restored := envVars{"PROGRESSDB_DB_PATH": filepath.Join(dir, "db"), "PROGRESSDB_KEK": clusterKEK,
		"PROGRESSDB_KEYSTORE_PATH":        filepath.Join(dir, "keys"),
		"PROGRESSDB_RETENTION_AUDIT_PATH": cluster.ShardAuditPath(envs["node-2"]["PROGRESSDB_RETENTION_AUDIT_PATH"], 0)}
	if p := runCLI(t, restored, "restore", file, "--db", filepath.Join(dir, "db")); p.code != 0 {
		t.Fatalf("restore: %d\n%s", p.code, p.output())
	}
	ctx := context.Background()
	keeper, err := keystore.OpenKEK(ctx, clusterKEK)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := keystore.Open(ctx, filepath.Join(dir, "keys"), keystore.Options{Keeper: keeper, MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(dir, "db"), store.Options{Sealer: ks, Closer: ks})
	if err != nil {
		_ = ks.Close()
		t.Fatal(err)
	}
	defer st.Close()
	for _, tid := range threads {
		if th, err := st.GetThread(ctx, tid); err != nil || th.Title != marker(tid, "title") {
			t.Errorf("restored thread %s: %+v, %v", tid, th, err)
		}
	}
}
