package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// The replicated erasure's authors: one erased, one whose writing beside
// theirs stays.
const (
	replErased = "AnnErased-R15"
	replKept   = "BobStays-R15"
)

// replErasureSite is what the authors wrote across the shards.
type replErasureSite struct {
	threads []string // two per shard: the first created by the erased author
	erased  []string // the erased author's messages, as tid/mid, outside the held thread
	kept    []string // the other author's, as tid/mid
	held    string   // under legal hold: keeps the erased author's message
	heldMsg string
	markers []string // the erased author's name, titles and bodies
}

// seedReplErasure writes through the nodes in turn two threads on every
// shard, one created by each author, with two messages of the erased
// author (one edited, or one soft-deleted) and one of the other in each,
// and a thread on heldShard under legal hold with a message of each.
func seedReplErasure(t *testing.T, nodes []*testNode, heldShard int) replErasureSite {
	t.Helper()
	s := replErasureSite{markers: []string{replErased}}
	perShard := map[int]int{}
	for i := 0; len(s.threads) < 2*testShards; i++ {
		id := fmt.Sprintf("re%d", i)
		if n := cluster.ShardOf(id, testShards); perShard[n] < 2 {
			perShard[n]++
			s.threads = append(s.threads, id)
		}
	}
	for i := 0; s.held == ""; i++ {
		if id := fmt.Sprintf("rh%d", i); cluster.ShardOf(id, testShards) == heldShard {
			s.held = id
		}
	}
	step := 0
	send := func(method, path, body string, h http.Header, want int) {
		t.Helper()
		via := nodes[step%len(nodes)]
		step++
		if code, out := retryCall(t, method, via.url()+path, body, h); code != want {
			t.Fatalf("%s %s through %s: %d %s", method, path, via.id, code, out)
		}
	}
	post := func(tid, mid, author, text string) {
		t.Helper()
		send(http.MethodPost, "/v1/threads/"+tid+"/messages", fmt.Sprintf(`{"id":%q,"author":%q,"body":{"text":%q}}`, mid, author, text),
			http.Header{"Idempotency-Key": {"seed-" + tid + "-" + mid}}, http.StatusCreated)
	}
	for i, tid := range s.threads {
		creator, title := replKept, "kept-title-"+tid
		if i%2 == 0 {
			creator, title = replErased, "erased-title-"+tid
			s.markers = append(s.markers, title)
		}
		send(http.MethodPost, "/v1/threads", fmt.Sprintf(`{"id":%q,"title":%q,"author":%q}`, tid, title, creator),
			http.Header{"Idempotency-Key": {"seed-" + tid}}, http.StatusCreated)
		for j := range 2 {
			mid := fmt.Sprintf("%s-e%d", tid, j)
			post(tid, mid, replErased, "erased-body-"+mid)
			s.markers = append(s.markers, "erased-body-"+mid)
			s.erased = append(s.erased, tid+"/"+mid)
		}
		// The first message edited in threads the erased author created,
		// the second soft-deleted in the others: both are erased.
		if i%2 == 0 {
			mid := tid + "-e0"
			send(http.MethodPut, "/v1/threads/"+tid+"/messages/"+mid, `{"body":{"text":"erased-edit-`+mid+`"}}`, nil, http.StatusOK)
			s.markers = append(s.markers, "erased-edit-"+mid)
		} else {
			send(http.MethodDelete, "/v1/threads/"+tid+"/messages/"+tid+"-e1", "", nil, http.StatusNoContent)
		}
		post(tid, tid+"-k", replKept, "kept-body-"+tid)
		s.kept = append(s.kept, tid+"/"+tid+"-k")
	}
	send(http.MethodPost, "/v1/threads", fmt.Sprintf(`{"id":%q,"title":"held","author":%q}`, s.held, replKept), nil, http.StatusCreated)
	s.heldMsg = s.held + "-e"
	post(s.held, s.heldMsg, replErased, "held-body")
	post(s.held, s.held+"-k", replKept, "kept-body-"+s.held)
	s.kept = append(s.kept, s.held+"/"+s.held+"-k")
	send(http.MethodPut, "/admin/threads/"+s.held+"/legal_hold", `{"legal_hold":true}`, adminAuth, http.StatusOK)
	return s
}

// erasedOnDisk is what a replica's files hold of the erased author before
// the erasure, read from a stopped node: every sealed version they wrote
// (outside the held thread) and, from its key stores, each of their
// keys' wrapped DEK. Each must be found there, so that finding none
// after proves something. (Key names and the author index's HMAC are
// not looked for: a table's bounds in a MANIFEST may keep them.)
func erasedOnDisk(t *testing.T, node *testNode, secret []byte, s replErasureSite) []string {
	t.Helper()
	ctx := context.Background()
	var sealed, wrapped []string
	for n := range testShards {
		st := openSealedShard(t, node, n, secret)
		for _, m := range s.erased {
			tid, mid, _ := strings.Cut(m, "/")
			if cluster.ShardOf(tid, testShards) != n {
				continue
			}
			vs, err := st.ListVersions(ctx, tid, mid)
			if err != nil {
				t.Fatalf("%s's versions of %s: %v", node.id, m, err)
			}
			for _, v := range vs {
				if v.Sealed != "" {
					sealed = append(sealed, v.Sealed)
				}
			}
		}
		ks := KeyStore(st)
		refs, err := ks.AuthorKeys(ctx, replErased)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		db, err := pebble.Open(cluster.ShardKeystorePath(filepath.Join(node.dir, "keys"), n), &pebble.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range refs {
			if r.Thread == s.held {
				continue
			}
			name := fmt.Sprintf("k:%s:k:%010d", r.Thread, r.Number)
			v, closer, err := db.Get([]byte(name))
			if err != nil {
				t.Fatalf("%s's key %s: %v", node.id, name, err)
			}
			wrapped = append(wrapped, string(v[32:]))
			_ = closer.Close()
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if len(sealed) < len(s.erased) || len(wrapped) != len(s.threads) {
		t.Fatalf("%s holds %d sealed versions and %d keys of the author, want one of each message and one key per thread",
			node.id, len(sealed), len(wrapped))
	}
	storetest.RequireAll(t, filepath.Join(node.dir, "data"), sealed...)
	storetest.RequireAll(t, filepath.Join(node.dir, "keys"), wrapped...)
	return append(sealed, wrapped...)
}

// openSealedShard opens shard n of a stopped node's folder with its key
// store, as the node does.
func openSealedShard(t *testing.T, node *testNode, n int, secret []byte) *store.Store {
	t.Helper()
	cfg := shardConfig(config.Config{DBPath: filepath.Join(node.dir, "data"), KEK: sealKEK(),
		KeystorePath: filepath.Join(node.dir, "keys")}, n)
	st, err := store.Open(cfg.DBPath, store.Options{MustExist: true,
		OpenSealer: sealerOpener(cfg, slog.New(slog.DiscardHandler), KeepPlain, clusterSecrets{replica: secret})})
	if err != nil {
		t.Fatalf("open %s's shard %d: %v", node.id, n, err)
	}
	return st
}

// watchedLog is a node's log kept for the test to look into, its
// warnings and errors also logged through t.
type watchedLog struct {
	lockedLog
	t    *testing.T
	stop *logStop // nil: none
}

func (w *watchedLog) Write(p []byte) (int, error) {
	s := string(p)
	if strings.Contains(s, "level=WARN") || strings.Contains(s, "level=ERROR") {
		w.t.Log(strings.TrimSpace(s))
	}
	n, err := w.lockedLog.Write(p)
	if w.stop != nil && lineHas(s, w.stop.parts...) {
		w.stop.hold(w)
	}
	return n, err
}

// has reports whether a line of the log holds every one of parts.
func (w *watchedLog) has(parts ...string) bool {
	for _, line := range strings.Split(w.String(), "\n") {
		if lineHas(line, parts...) {
			return true
		}
	}
	return false
}

func lineHas(line string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(line, p) {
			return false
		}
	}
	return true
}

// logStop holds up the first node that logs a line holding every one of
// parts, in that log call, until the test has stopped it: what it
// logged is the last step it made.
type logStop struct {
	parts  []string
	once   sync.Once
	hit    chan *watchedLog // the node's log, once
	resume chan struct{}    // closed once the node is told to stop
}

func newLogStop(parts ...string) *logStop {
	return &logStop{parts: parts, hit: make(chan *watchedLog, 1), resume: make(chan struct{})}
}

func (s *logStop) hold(w *watchedLog) {
	s.once.Do(func() {
		s.hit <- w
		select {
		case <-s.resume:
		case <-time.After(time.Minute): // a failed test lets it go
		}
	})
}

// TestReplicatedSubjectErasure: a subject erasure on a sealed cluster of
// three nodes with three replicas per shard, asked for through the API
// as operators do (spec §11.1, §12, §15). The leader of one shard's
// group stops once it destroyed the author's keys there, before its
// purges are done; the next leader finishes the shard's part with no
// new request, and the erasure completes with exact totals. The node
// started again catches up by snapshot (the destroys dropped the log it
// lacked), its key store with it. Then through every node the author's
// messages are gone, titles they wrote read null, the other author's
// messages and the held thread's stay; every replica's shard trail is
// the same files and the cluster's receipt verifies against each
// node's audit folder; no file under any node's data, key store or
// audit folder holds the author, their content, its ciphertexts or
// their destroyed keys; and each replica's own database has none of
// their messages and every one of the other author's.
func TestReplicatedSubjectErasure(t *testing.T) {
	t.Parallel()
	priv, pub := signingKeyFiles(t, t.TempDir())
	extra := []string{"PROGRESSDB_AUDIT_SIGNING_KEY=" + priv}
	const shard = 1 // whose leader stops
	inShard := fmt.Sprintf(" shard=%d ", shard)
	// The shard's leader stops once its keys of the author are gone.
	stop := newLogStop("msg=retention_erasure_keys_destroyed", inShard)
	etcd, nodes, logs := startWatchedSealed(t, extra, stop, "node-a", "node-b", "node-c")
	s := seedReplErasure(t, nodes, (shard+1)%testShards)

	secret := replicaSecret(t, etcd)
	nodes[2].shutdown()
	needles := append(erasedOnDisk(t, nodes[2], secret, s), s.markers...)
	nodes[2], logs[2] = startWatchedNode(t, etcd, nodes[2].id, nodes[2].dir, extra, stop)
	for n := range testShards {
		waitLeader(t, etcd, n, 0)
	}

	code, body := retryCall(t, http.MethodPost, nodes[0].url()+"/admin/erasures", `{"author":"`+replErased+`"}`, adminAuth)
	if code != http.StatusAccepted {
		t.Fatalf("request: %d %s", code, body)
	}
	var acc retention.ErasureAccepted
	if err := json.Unmarshal(body, &acc); err != nil {
		t.Fatal(err)
	}
	var hit *watchedLog
	select {
	case hit = <-stop.hit:
	case <-time.After(time.Minute):
		t.Fatalf("shard %d's keys of the author not destroyed within a minute", shard)
	}
	stopped := slices.Index(logs, hit)
	nodes[stopped].stop()
	close(stop.resume)
	nodes[stopped].shutdown()
	var live []*testNode
	for i, n := range nodes {
		if i != stopped {
			live = append(live, n)
		}
	}
	st := waitErasure(t, live[0].url(), acc.ErasureID)
	erasedThreads := len(s.threads) // a key each
	if st.Status != retention.ErasureCompleted || st.KeysDestroyed != int64(erasedThreads) || st.MessagesPurged != int64(len(s.erased)) ||
		st.VersionsPurged != int64(len(s.erased)+len(s.threads)) || !slices.Equal(st.HeldThreads, []string{s.held}) || len(st.Shards) != testShards {
		t.Fatalf("erasure %+v; want completed, %d keys, %d messages, %d versions, %s held", st, erasedThreads, len(s.erased),
			len(s.erased)+len(s.threads), s.held)
	}
	if logs[stopped].has("msg=retention_erasure_completed", inShard) {
		t.Fatalf("%s completed shard %d's part before it stopped", nodes[stopped].id, shard)
	}
	t.Logf("shard %d's leader %s stopped mid-erasure; runs %v", shard, nodes[stopped].id, st.RunIDs)

	// Started again, the node catches up (a destroy dropped the log
	// before what it lacks: by snapshot, with the key store).
	nodes[stopped], logs[stopped] = startWatchedNode(t, etcd, nodes[stopped].id, nodes[stopped].dir, extra, nil)
	waitAllErased(t, etcd, nodes)
	if !logs[stopped].has("msg=replica_snapshot_installed", fmt.Sprintf(" group=%d ", shard)) {
		t.Fatalf("%s's replica of shard %d caught up without a snapshot", nodes[stopped].id, shard)
	}
	checkErasedThroughNodes(t, nodes, s)
	checkReceiptOnEveryReplica(t, nodes, acc.ErasureID, st, pub, len(s.erased))

	// Each replica erases its key store and its log in the background:
	// wait for it, then look at every file of the stopped nodes.
	for _, n := range nodes {
		for _, dir := range []string{"keys", "data"} {
			waitNone(t, filepath.Join(n.dir, dir), needles)
		}
	}
	for _, n := range nodes {
		n.shutdown()
	}
	records := map[int]store.Erasure{}
	for _, n := range nodes {
		for _, dir := range []string{"data", "keys", "audit"} {
			storetest.RequireNone(t, filepath.Join(n.dir, dir), needles...)
		}
		for shard, rec := range checkReplicaErased(t, n, secret, s, acc.ErasureID) {
			if first, ok := records[shard]; !ok {
				records[shard] = rec
			} else if !reflect.DeepEqual(rec, first) {
				t.Errorf("%s's record of the erasure on shard %d: %+v; another replica's: %+v", n.id, shard, rec, first)
			}
		}
	}
}

// startWatchedSealed is startSealedReplicated with each node's log kept.
func startWatchedSealed(t *testing.T, extra []string, stop *logStop, ids ...string) (etcd *etcdtest.Server, nodes []*testNode, logs []*watchedLog) {
	t.Helper()
	etcd = etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, err := cluster.EnsureReplicated(ctx, etcd.Client(t), cluster.Keys{Name: "chat"}, testShards, 3, ids); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		n, l := startWatchedNode(t, etcd, id, t.TempDir(), extra, stop)
		nodes, logs = append(nodes, n), append(logs, l)
	}
	for n := range testShards {
		waitLeader(t, etcd, n, 0)
	}
	return etcd, nodes, logs
}

// startWatchedNode starts a sealed node of the cluster on its folder dir,
// with more settings, its log kept.
func startWatchedNode(t *testing.T, etcd *etcdtest.Server, id, dir string, extra []string, stop *logStop) (*testNode, *watchedLog) {
	t.Helper()
	l := &watchedLog{t: t, stop: stop}
	env := append([]string{"PROGRESSDB_RETENTION_AUDIT_PATH=" + filepath.Join(dir, "audit"),
		"PROGRESSDB_KEK=" + sealKEK(), "PROGRESSDB_KEYSTORE_PATH=" + filepath.Join(dir, "keys"),
		// Only the erasure's runs: none scheduled or missed.
		"PROGRESSDB_RETENTION_CRON=@every 1h", "PROGRESSDB_RETENTION_RUN_MISSED=false"}, extra...)
	n := startNodeLogging(t, etcd, id, dir, slog.New(slog.NewTextHandler(l, nil)), env...)
	return n, l
}

// waitAllErased waits until every replica of every shard caught up
// with its leader and none owes an erase.
func waitAllErased(t *testing.T, etcd *etcdtest.Server, nodes []*testNode) {
	t.Helper()
	for n := range testShards {
		waitCaughtUp(t, etcd, n)
		waitErased(t, nodes, n)
	}
}

// checkErasedThroughNodes reads through every node: the erased author's
// messages are gone, the titles and authors of threads they created read
// null, the other author's messages and the held thread's stay.
func checkErasedThroughNodes(t *testing.T, nodes []*testNode, s replErasureSite) {
	t.Helper()
	get := func(via *testNode, path string) (int, string) {
		code, body := retryCall(t, http.MethodGet, via.url()+path, "", nil)
		return code, string(body)
	}
	for _, via := range nodes {
		for _, m := range s.erased {
			if code, body := get(via, "/v1/threads/"+strings.Replace(m, "/", "/messages/", 1)+"?include_deleted=true"); code != http.StatusNotFound {
				t.Errorf("%s through %s after the erasure: %d %s", m, via.id, code, body)
			}
		}
		for _, m := range s.kept {
			if code, body := get(via, "/v1/threads/"+strings.Replace(m, "/", "/messages/", 1)); code != http.StatusOK || !strings.Contains(body, replKept) {
				t.Errorf("%s through %s: %d %s", m, via.id, code, body)
			}
		}
		for i, tid := range s.threads {
			code, body := get(via, "/v1/threads/"+tid)
			created := i%2 == 0
			if code != http.StatusOK || created != strings.Contains(body, `"title":null`) || created != strings.Contains(body, `"author":null`) {
				t.Errorf("thread %s through %s: %d %s", tid, via.id, code, body)
			}
		}
		if code, body := get(via, "/v1/threads/"+s.held+"/messages/"+s.heldMsg); code != http.StatusOK || !strings.Contains(body, replErased) {
			t.Errorf("the held thread's message through %s: %d %s", via.id, code, body)
		}
	}
}

// checkReceiptOnEveryReplica gets the erasure's receipt through every
// node (the same document), checks it against the status, and verifies
// it offline against each node's own audit folder: every replica holds
// its shards' trails, the same files, byte for byte.
func checkReceiptOnEveryReplica(t *testing.T, nodes []*testNode, id string, st retention.ErasureStatus, pub string, items int) {
	t.Helper()
	pk, err := audit.LoadPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	var first []byte
	for _, via := range nodes {
		code, body := retryCall(t, http.MethodGet, via.url()+"/admin/erasures/"+id+"/receipt", "", adminAuth)
		if code != http.StatusOK || strings.Contains(string(body), replErased) {
			t.Fatalf("receipt through %s: %d %s", via.id, code, body)
		}
		if first == nil {
			first = body
		} else if string(body) != string(first) {
			t.Errorf("receipt through %s differs:\n%s\nfrom\n%s", via.id, body, first)
		}
	}
	var rc audit.Receipt
	if err := json.Unmarshal(first, &rc); err != nil {
		t.Fatal(err)
	}
	if len(rc.Items) != items || rc.Subject != st.Subject || !slices.Equal(rc.HeldThreads, st.HeldThreads) || len(rc.Shards) != testShards {
		t.Fatalf("receipt: %d items, subject %s, held %v, %d shards; want %d items, %s, %v", len(rc.Items), rc.Subject,
			rc.HeldThreads, len(rc.Shards), items, st.Subject, st.HeldThreads)
	}
	for n := range testShards {
		sameTrails(t, nodes, n, trailFiles(t, nodes[0], n))
	}
	for _, node := range nodes {
		if ps := audit.VerifyReceipt(rc, filepath.Join(node.dir, "audit"), pk); len(ps) != 0 {
			t.Errorf("the receipt against %s's audit folder: %v", node.id, ps)
		}
	}
}

// waitNone waits until no file under dir holds any of needles (a
// replica erases in the background), and fails naming where they are.
func waitNone(t *testing.T, dir string, needles []string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		rep, err := storetest.Scan(dir, needles)
		if err != nil {
			t.Fatal(err)
		}
		found := rep.Found()
		if len(found) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, f := range found {
				t.Errorf("%q is in %v", f, rep[f])
			}
			t.Fatalf("%s still holds what was erased", dir)
		}
	}
}

// trailFiles counts the files of shard n's trail on node.
func trailFiles(t *testing.T, node *testNode, n int) int {
	t.Helper()
	count := 0
	err := filepath.WalkDir(shardTrail(node, n), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			count++
		}
		return err
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return count
}

// checkReplicaErased opens every shard of a stopped node as it is on its
// disk: none of the erased author's messages is there, every one of the
// other author's opens, the key store keeps no pending erasure (nor its
// sealed author), and the shard's record of erasure id is completed; it
// returns those records.
func checkReplicaErased(t *testing.T, node *testNode, secret []byte, s replErasureSite, id string) map[int]store.Erasure {
	t.Helper()
	ctx := context.Background()
	records := map[int]store.Erasure{}
	for n := range testShards {
		st := openSealedShard(t, node, n, secret)
		rec, err := st.GetErasure(ctx, id)
		if err != nil || rec.Status != retention.ErasureCompleted {
			t.Errorf("%s's replica of shard %d: erasure %s: %+v, %v", node.id, n, id, rec, err)
		}
		records[n] = rec
		if pending, err := KeyStore(st).PendingErasures(ctx); err != nil || len(pending) != 0 {
			t.Errorf("%s's key store of shard %d: erasures pending %v, %v", node.id, n, pending, err)
		}
		for _, m := range s.erased {
			tid, mid, _ := strings.Cut(m, "/")
			if cluster.ShardOf(tid, testShards) != n {
				continue
			}
			if got, err := st.GetMessage(ctx, tid, mid); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s's replica of shard %d holds %s: %+v, %v", node.id, n, m, got, err)
			}
		}
		for _, m := range s.kept {
			tid, mid, _ := strings.Cut(m, "/")
			if cluster.ShardOf(tid, testShards) != n {
				continue
			}
			if got, err := st.GetMessage(ctx, tid, mid); err != nil || got.Author != replKept || got.Unreadable {
				t.Errorf("%s's replica of shard %d: %s: %+v, %v", node.id, n, m, got, err)
			}
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return records
}
