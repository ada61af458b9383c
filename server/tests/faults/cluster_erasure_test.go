package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// The cluster erasure's authors: one erased on every shard, one whose
// writing beside theirs stays.
const (
	clusterErased = "ErasedAuthor-C11"
	clusterKept   = "KeptAuthor-C11"
)

// clusterErasureSite is what the erased author wrote across the shards.
type clusterErasureSite struct {
	erased  []string // their messages, as tid/mid, outside the held thread
	kept    []string // the other author's, as tid/mid
	held    string   // the thread under legal hold, which keeps theirs
	threads int      // threads they wrote in, the held one left out
	markers []string // their name, titles and bodies
}

// seedClusterErasure writes through via threads on every shard, each
// with messages of both authors (some edited, some soft-deleted); the
// first thread of shard 0 is put under legal hold.
func seedClusterErasure(t *testing.T, via *server, perShard, perThread int) clusterErasureSite {
	t.Helper()
	cs := clusterErasureSite{markers: []string{clusterErased}}
	for n := range clusterShards {
		for i := range perShard {
			tid := threadInShard(n, i)
			title := marker(tid, "title")
			cs.markers = append(cs.markers, title)
			via.mustCall(t, "POST", "/v1/threads", map[string]string{"id": tid, "title": title, "author": clusterErased}, "", http.StatusCreated, nil)
			for j := range perThread {
				mid := fmt.Sprintf("%s-e%d", tid, j)
				body := marker(mid, "body")
				cs.markers = append(cs.markers, body)
				via.mustCall(t, "POST", "/v1/threads/"+tid+"/messages", map[string]any{"id": mid, "author": clusterErased, "body": body}, "", http.StatusCreated, nil)
				switch j % 3 {
				case 1:
					edit := marker(mid, "edit")
					cs.markers = append(cs.markers, edit)
					via.mustCall(t, "PUT", "/v1/threads/"+tid+"/messages/"+mid, map[string]any{"body": edit}, "", http.StatusOK, nil)
				case 2:
					via.mustCall(t, "DELETE", "/v1/threads/"+tid+"/messages/"+mid, nil, "", http.StatusNoContent, nil)
				}
				if n != 0 || i != 0 {
					cs.erased = append(cs.erased, tid+"/"+mid)
				}
			}
			kid := tid + "-k"
			via.mustCall(t, "POST", "/v1/threads/"+tid+"/messages", map[string]any{"id": kid, "author": clusterKept, "body": "kept"}, "", http.StatusCreated, nil)
			cs.kept = append(cs.kept, tid+"/"+kid)
			if n == 0 && i == 0 {
				cs.held = tid
				via.mustCall(t, "PUT", "/admin/threads/"+tid+"/legal_hold", map[string]bool{"legal_hold": true}, adminToken, http.StatusOK, nil)
			} else {
				cs.threads++
			}
		}
	}
	return cs
}

// clusterErasure reads erasure id's status through s.
func clusterErasure(t *testing.T, s *server, id string) retention.ErasureStatus {
	t.Helper()
	var st retention.ErasureStatus
	s.mustCall(t, "GET", "/admin/erasures/"+id, nil, adminToken, http.StatusOK, &st)
	return st
}

// TestFaultClusterSubjectErasure runs three sealed node processes of the
// built binary and a fourth that owns no shard (spec §11.1). One request
// through the fourth erases an author whose threads span every shard.
// The owner of shard 2 is killed with SIGKILL mid-erasure, so its shard
// shows pending; shard 1 is moved to another node while the erasure is
// open; restarted, the killed node finishes its part with no new request.
// Then: every shard completed with exact totals, exactly one purged
// record per message in the shards' trails, the other author's writing
// and the held thread intact, no marker of the author's name, titles or
// bodies in any file of any node (data, key stores, audit folders) or in
// backups made after, and the cluster's receipt verifies offline against
// the nodes' audit folders gathered in one, and fails once one shard's
// line is edited.
func TestFaultClusterSubjectErasure(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	endpoints := strings.Join(etcd.Endpoints(), ",")
	keysDir := t.TempDir()
	priv, pub := writeKeys(t, keysDir, "signing")
	extra := []string{"PROGRESSDB_AUDIT_SIGNING_KEY", priv, "PROGRESSDB_RETENTION_RUN_MISSED", "false",
		// Paced, so that a kill lands mid-erasure.
		"PROGRESSDB_RETENTION_BATCH_SIZE", "1", "PROGRESSDB_RETENTION_BATCH_PAUSE", "50ms"}
	envs := sealedClusterEnvs(t, endpoints, extra...)
	nodes := startNodes(t, envs)
	fourthDir := t.TempDir()
	fourth := startClusterNode(t, clusterNodeEnv(t, endpoints, "node-4", fourthDir).with("PROGRESSDB_KEK", clusterKEK,
		"PROGRESSDB_KEYSTORE_PATH", filepath.Join(fourthDir, "keys"),
		"PROGRESSDB_RETENTION_AUDIT_PATH", filepath.Join(fourthDir, "audit")).with(extra...))
	cs := seedClusterErasure(t, nodes[0], 2, pick(8, 16))

	var acc retention.ErasureAccepted
	fourth.mustCall(t, "POST", "/admin/erasures", map[string]string{"author": clusterErased}, adminToken, http.StatusAccepted, &acc)
	// node-3 owns shard 2 (round robin): killed once its keys are gone,
	// before its purges are done.
	waitLog(t, nodes[2], "retention_erasure_keys_destroyed")
	nodes[2].kill()
	shard2 := cluster.ShardAuditPath(envs["node-3"]["PROGRESSDB_RETENTION_AUDIT_PATH"], 2)
	for _, f := range readAudit(t, shard2) {
		if f.header != nil && f.header.Trigger == audit.TriggerErasure && f.sealed {
			t.Fatalf("shard 2's part of the erasure ended before the kill: %s", f.path)
		}
	}
	// Shard 1 moves from node-2 to node-1 while the erasure is open (a
	// move waits for a run of the shard going): its part, done or owed,
	// and its trail go with it.
	t.Logf("before the move: %+v", clusterErasure(t, fourth, acc.ErasureID).Shards)
	fourth.mustCall(t, "POST", "/admin/cluster/shards/1/move", map[string]string{"to": "node-1"}, adminToken, http.StatusOK, nil)
	st := clusterErasure(t, fourth, acc.ErasureID)
	if st.Status == retention.ErasureCompleted || len(st.Shards) != clusterShards || st.Shards[2].Status != retention.ErasurePending {
		t.Fatalf("with shard 2's owner down: %+v", st)
	}

	waitUnregistered(t, fourth, "node-3")
	nodes[2] = startClusterNode(t, envs["node-3"])
	waitFor(t, 2*time.Minute, "the erasure to complete on every shard", func() bool {
		st = clusterErasure(t, fourth, acc.ErasureID)
		return st.Status == retention.ErasureCompleted
	})
	if st.MessagesPurged != int64(len(cs.erased)) || st.KeysDestroyed != int64(cs.threads) ||
		len(st.HeldThreads) != 1 || st.HeldThreads[0] != cs.held {
		t.Fatalf("completed: %+v; want %d messages, %d keys, held %s", st, len(cs.erased), cs.threads, cs.held)
	}
	for _, sh := range st.Shards {
		if sh.Status != retention.ErasureCompleted {
			t.Fatalf("shard %d: %+v", sh.Shard, sh)
		}
	}
	for _, via := range []*server{fourth, nodes[1]} {
		for _, m := range cs.erased {
			via.mustCall(t, "GET", "/v1/threads/"+strings.Replace(m, "/", "/messages/", 1)+"?include_deleted=true", nil, "", http.StatusNotFound, nil)
		}
		for _, m := range cs.kept {
			via.mustCall(t, "GET", "/v1/threads/"+strings.Replace(m, "/", "/messages/", 1), nil, "", http.StatusOK, nil)
		}
	}

	receipt := filepath.Join(t.TempDir(), "receipt.json")
	code, body := fourth.call(t, "GET", "/admin/erasures/"+acc.ErasureID+"/receipt", nil, adminToken)
	if code != http.StatusOK {
		t.Fatalf("receipt: %d %s", code, body)
	}
	if err := os.WriteFile(receipt, body, 0o600); err != nil {
		t.Fatal(err)
	}
	var rc audit.Receipt
	if err := json.Unmarshal(body, &rc); err != nil || len(rc.Items) != len(cs.erased) || len(rc.Shards) != clusterShards {
		t.Fatalf("receipt: %v; %d items, %d shards", err, len(rc.Items), len(rc.Shards))
	}
	backups := clusterBackups(t, fourth, pub)
	// etcd keeps the status, not the author.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all, err := etcd.Client(t).Get(ctx, "/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range all.Kvs {
		if strings.Contains(string(kv.Value), clusterErased) || (strings.Contains(string(kv.Key), "/erasures/") && strings.Contains(string(kv.Value), `"author"`)) {
			t.Errorf("etcd's %s still holds the author: %s", kv.Key, kv.Value)
		}
	}
	// Pruned from etcd (cluster.DefaultErasureKeep after completion), the
	// erasure answers from the parts the shards keep, as it did.
	if n, err := cluster.PruneErasures(ctx, etcd.Client(t), cluster.Keys{Name: "progressdb"}, time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("prune the completed erasure: %d, %v", n, err)
	}
	if after := clusterErasure(t, fourth, acc.ErasureID); !reflect.DeepEqual(after, st) {
		t.Fatalf("status once pruned from etcd:\n%+v\nwant as before:\n%+v", after, st)
	}
	if code, again := fourth.call(t, "GET", "/admin/erasures/"+acc.ErasureID+"/receipt", nil, adminToken); code != http.StatusOK || !bytes.Equal(again, body) {
		t.Fatalf("receipt once pruned: %d, same %t", code, bytes.Equal(again, body))
	}
	fourth.mustCall(t, "GET", "/admin/erasures/0000000000000000", nil, adminToken, http.StatusNotFound, nil)

	homes := map[int]string{}
	for _, sh := range clusterState(t, fourth).Shards {
		homes[sh.N] = sh.Home
	}
	for i, n := range append(nodes, fourth) {
		if code := n.stop(t); code != 0 {
			t.Fatalf("node %d stopped with %d\n%s", i+1, code, n.output())
		}
	}

	// The shards' trails, each from its home, gathered in one folder.
	gathered := t.TempDir()
	records := map[string]int{}
	for n := range clusterShards {
		env := envs[homes[n]]
		src := cluster.ShardAuditPath(env["PROGRESSDB_RETENTION_AUDIT_PATH"], n)
		copyTree(t, src, filepath.Join(gathered, "shards", strconv.Itoa(n)))
		for _, f := range readAudit(t, src) {
			for _, it := range f.items {
				if it.Status == "purged" {
					records[it.ThreadID+"/"+it.ItemID]++
					if it.Cause != "subject" || it.ErasureID != acc.ErasureID {
						t.Errorf("%s: purged with cause %q for erasure %q", it.ItemID, it.Cause, it.ErasureID)
					}
				}
			}
		}
	}
	for _, m := range cs.erased {
		if records[m] != 1 {
			t.Errorf("%s has %d purged records, want 1", m, records[m])
		}
	}
	if len(records) != len(cs.erased) {
		t.Errorf("%d items have purged records, want the %d erased messages", len(records), len(cs.erased))
	}
	if p := runCLI(t, envVars{}, "erasure", "verify", receipt, "--public-key", pub, "--audit", gathered); p.code != 0 {
		t.Fatalf("verify the cluster's receipt: %d\n%s", p.code, p.output())
	}

	for _, dir := range []string{nodeDir(envs["node-1"]), nodeDir(envs["node-2"]), nodeDir(envs["node-3"]), fourthDir, backups} {
		storetest.RequireNone(t, dir, cs.markers...)
	}

	// One shard's line edited: the receipt fails, naming that file.
	edited := rc.Audit[len(rc.Audit)-1]
	path := filepath.Join(gathered, filepath.FromSlash(edited.File))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	seq := edited.Lines[0].Seq
	lines[seq] = strings.Replace(lines[seq], `"status":"purged"`, `"status":"purged" `, 1)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	p := runCLI(t, envVars{}, "erasure", "verify", receipt, "--public-key", pub, "--audit", gathered)
	if p.code != 1 || !strings.Contains(p.output(), edited.File) {
		t.Fatalf("verify with %s edited: %d\n%s", edited.File, p.code, p.output())
	}
}

// clusterBackups streams a backup of every shard through s, made after
// the erasure, and unpacks each (data and key store) under the folder
// it returns.
func clusterBackups(t *testing.T, s *server, pub string) string {
	t.Helper()
	dir := t.TempDir()
	key, err := audit.LoadPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	for n := range clusterShards {
		code, body := s.call(t, "POST", fmt.Sprintf("/admin/backups/stream?shard=%d", n), nil, adminToken)
		if code != http.StatusOK {
			t.Fatalf("backup of shard %d: %d %s", n, code, body)
		}
		file := filepath.Join(dir, fmt.Sprintf("shard-%d.tar", n))
		if err := os.WriteFile(file, body, 0o600); err != nil {
			t.Fatal(err)
		}
		into := filepath.Join(dir, fmt.Sprintf("shard-%d", n))
		if err := os.MkdirAll(into, 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := backup.Unpack(context.Background(), file, into, into+"-keys", key); err != nil {
			t.Fatalf("unpack the backup of shard %d: %v", n, err)
		}
	}
	return dir
}

// copyTree copies the files under src into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFaultClusterErasureNodeLost: the owner of shard 2 is down when an
// erasure is asked for, and its volume is lost for good. The erasure
// stays running with shard 2 pending; the shard restored from a backup
// made before the erasure (`progressdb restore` into the folders of a
// replacement node with the same ID, its key store with it) finishes the
// erasure once that node owns it, with no new request
// (docs/subject-erasure.md, "A node lost for good during an erasure").
func TestFaultClusterErasureNodeLost(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	priv, pub := writeKeys(t, t.TempDir(), "signing")
	envs := sealedClusterEnvs(t, strings.Join(etcd.Endpoints(), ","), "PROGRESSDB_AUDIT_SIGNING_KEY", priv,
		"PROGRESSDB_RETENTION_RUN_MISSED", "false")
	nodes := startNodes(t, envs)
	cs := seedClusterErasure(t, nodes[0], 1, 4)
	code, body := nodes[0].call(t, "POST", "/admin/backups/stream?shard=2", nil, adminToken)
	if code != http.StatusOK {
		t.Fatalf("backup of shard 2: %d %s", code, body)
	}
	archive := filepath.Join(t.TempDir(), "shard-2.tar")
	if err := os.WriteFile(archive, body, 0o600); err != nil {
		t.Fatal(err)
	}
	nodes[2].kill()

	var acc retention.ErasureAccepted
	nodes[0].mustCall(t, "POST", "/admin/erasures", map[string]string{"author": clusterErased}, adminToken, http.StatusAccepted, &acc)
	waitFor(t, time.Minute, "shards 0 and 1 to complete their parts", func() bool {
		st := clusterErasure(t, nodes[1], acc.ErasureID)
		return st.Shards[0].Status == retention.ErasureCompleted && st.Shards[1].Status == retention.ErasureCompleted
	})
	if st := clusterErasure(t, nodes[1], acc.ErasureID); st.Status != retention.ErasureRunning || st.Shards[2].Status != retention.ErasurePending {
		t.Fatalf("with shard 2's node lost: %+v", st)
	}

	// The volume is lost: a replacement node, the same ID, the shard
	// restored from its backup.
	env := envs["node-3"]
	if err := os.RemoveAll(nodeDir(env)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(nodeDir(env), 0o700); err != nil {
		t.Fatal(err)
	}
	env = env.with(nodeTLS(t, "node-3", nodeDir(env))...)
	shardAudit := cluster.ShardAuditPath(env["PROGRESSDB_RETENTION_AUDIT_PATH"], 2)
	if err := os.MkdirAll(shardAudit, 0o700); err != nil {
		t.Fatal(err)
	}
	shardDB, shardKeys := cluster.ShardDBPath(env["PROGRESSDB_DB_PATH"], 2), cluster.ShardKeystorePath(env["PROGRESSDB_KEYSTORE_PATH"], 2)
	// The shard's folders, as a single database's (docs/cluster.md).
	shardEnv := envVars{"PROGRESSDB_KEK": clusterKEK, "PROGRESSDB_DB_PATH": shardDB, "PROGRESSDB_KEYSTORE_PATH": shardKeys,
		"PROGRESSDB_RETENTION_AUDIT_PATH": shardAudit}
	if p := runCLI(t, shardEnv, "restore", archive, "--db", shardDB, "--audit", shardAudit, "--keystore", shardKeys,
		"--public-key", pub); p.code != 0 {
		t.Fatalf("restore shard 2: %d\n%s", p.code, p.output())
	}
	waitUnregistered(t, nodes[0], "node-3")
	nodes[2] = startClusterNode(t, env)
	var st retention.ErasureStatus
	waitFor(t, 2*time.Minute, "the erasure to complete on the restored shard", func() bool {
		st = clusterErasure(t, nodes[0], acc.ErasureID)
		return st.Status == retention.ErasureCompleted
	})
	if st.MessagesPurged != int64(len(cs.erased)) || st.KeysDestroyed != int64(cs.threads) {
		t.Fatalf("completed: %+v; want %d messages, %d keys", st, len(cs.erased), cs.threads)
	}
	for _, m := range cs.erased {
		nodes[2].mustCall(t, "GET", "/v1/threads/"+strings.Replace(m, "/", "/messages/", 1)+"?include_deleted=true", nil, "", http.StatusNotFound, nil)
	}
	for _, m := range cs.kept {
		nodes[2].mustCall(t, "GET", "/v1/threads/"+strings.Replace(m, "/", "/messages/", 1), nil, "", http.StatusOK, nil)
	}
	for i, n := range nodes {
		if code := n.stop(t); code != 0 {
			t.Fatalf("node %d stopped with %d\n%s", i+1, code, n.output())
		}
	}
	storetest.RequireNone(t, nodeDir(env), cs.markers...)
}
