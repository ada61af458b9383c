package faults

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// TestFaultClusterKeysCommands runs `keys encrypt-existing` and `keys
// rotate-kek` on a cluster node (spec §11.1): node-1, stopped, has its
// shard's plain content sealed under the shard's ownership and erased in
// clear; then its KEK rotated, the shard's key store and the cluster's
// receipt key re-wrapped, so that it starts with the new KEK only. The
// commands refuse while the node runs (both through one registration),
// and a rotation run again finds nothing left to do.
func TestFaultClusterKeysCommands(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	envs := clusterEnvs(t, strings.Join(etcd.Endpoints(), ","))
	nodes := startNodes(t, envs)
	var threads, markers []string
	for i := range 3 {
		tid := threadInShard(0, i) // node-1's shard
		threads = append(threads, tid)
		markers = append(markers, marker(tid, "title"), marker(tid, "body"))
		nodes[1].mustCall(t, "POST", "/v1/threads", map[string]string{"id": tid, "title": marker(tid, "title"), "author": "a"}, "", http.StatusCreated, nil)
		nodes[1].mustCall(t, "POST", "/v1/threads/"+tid+"/messages", map[string]any{"author": "a", "body": marker(tid, "body")}, "", http.StatusCreated, nil)
	}
	dir := nodeDir(envs["node-1"])
	sealed := envs["node-1"].with("PROGRESSDB_KEK", clusterKEK, "PROGRESSDB_KEYSTORE_PATH", filepath.Join(dir, "keys"),
		"PROGRESSDB_ADVERTISE_URL", nodes[0].url)
	if p := runCLI(t, sealed, "keys", "encrypt-existing"); p.code != 1 || !strings.Contains(p.stderr.String(), "stop it first") {
		t.Fatalf("encrypt-existing while node-1 runs: %d, want 1 saying to stop it\n%s", p.code, p.output())
	}
	addr := nodes[0].addr()
	if code := nodes[0].stop(t); code != 0 {
		t.Fatalf("node-1 stopped with %d\n%s", code, nodes[0].output())
	}
	if p := runCLI(t, sealed, "keys", "encrypt-existing"); p.code != 0 || !strings.Contains(p.stdout.String(), "sealed:") {
		t.Fatalf("encrypt-existing: %d\n%s", p.code, p.output())
	}
	storetest.RequireNone(t, dir, markers...)

	newKEK := "base64key://" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x3e}, 32))
	kekFile := filepath.Join(t.TempDir(), "new-kek")
	if err := os.WriteFile(kekFile, []byte(newKEK+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The node starts sealed (the cluster's receipt key is made then).
	nodes[0] = startClusterNodeAt(t, sealed, addr)
	if code := nodes[0].stop(t); code != 0 {
		t.Fatalf("node-1 stopped with %d\n%s", code, nodes[0].output())
	}
	wrappedBefore, _ := clusterReceiptKey(t, etcd) // opens with the old KEK
	for range 2 {                                  // the second finds it done
		if p := runCLI(t, sealed, "keys", "rotate-kek", "--to-file", kekFile); p.code != 0 {
			t.Fatalf("rotate-kek: %d\n%s", p.code, p.output())
		}
	}
	if after := etcdReceiptKey(t, etcd); bytes.Equal(after, wrappedBefore) {
		t.Error("the receipt key in etcd was not re-wrapped")
	}
	// The old KEK opens nothing any more; the new one everything.
	p := launchClusterNode(t, sealed, addr)
	if code := p.wait(t, time.Minute); code != 2 || !strings.Contains(p.stderr.String(), "PROGRESSDB_KEK") {
		t.Fatalf("node-1 with the old KEK: exit %d, want 2 naming PROGRESSDB_KEK\n%s", code, p.output())
	}
	nodes[0] = startClusterNodeAt(t, sealed.with("PROGRESSDB_KEK", newKEK), addr)
	waitFor(t, time.Minute, "every shard to be owned", func() bool { return ownedShards(clusterState(t, nodes[2])) == clusterShards })
	for _, tid := range threads {
		_, b := nodes[2].call(t, "GET", "/v1/threads/"+tid+"/messages", nil, "")
		if !strings.Contains(string(b), marker(tid, "body")) {
			t.Fatalf("thread %s after the rotation: %s", tid, b)
		}
	}
}
