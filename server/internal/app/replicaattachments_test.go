package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/testtools/s3server"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// replicaBlob is attachment aid's blob in shard n's default file://
// folder on node.
func replicaBlob(node *testNode, n int, tid, mid, aid string) string {
	dir := cluster.ShardAttachmentsDir("file://"+filepath.ToSlash(filepath.Join(node.dir, "data-attachments")), n)
	return filepath.Join(dir, filepath.FromSlash(store.BlobName(tid, mid, aid)))
}

// markedFile is size bytes that compress poorly, with marker every 64 KiB.
func markedFile(size int, marker string) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for off := 0; off+len(marker) <= size; off += 64 << 10 {
		copy(b[off:], marker)
	}
	return b
}

// TestReplicatedAttachmentsSurviveTheLeader: on a replicated cluster
// with the default file:// store, an upload's bytes reach every
// replica's folder through the log: a replica down during the upload
// gets them when it returns, every node serves the file byte for byte,
// and after the leader's node stops the next leader serves it from its
// own folder. A purge deletes the blob from every replica's folder, and
// no file of any node (data, log, blobs) holds its bytes afterwards.
func TestReplicatedAttachmentsSurviveTheLeader(t *testing.T) {
	replicatedAttachments(t, nil, func(node *testNode, tid, aid string) ([]byte, bool) {
		b, err := os.ReadFile(replicaBlob(node, replShard, tid, "m1", aid))
		return b, err == nil
	})
}

// TestReplicatedAttachmentsInABucket: with a shared bucket the replicas
// share the one object: the next leader serves it after the leader's
// node stops, the object is written once, and the purge deletes it once
// (one version, one delete marker in the versioned bucket); no node's
// folder holds its bytes.
func TestReplicatedAttachmentsInABucket(t *testing.T) {
	s3 := s3server.Start(t)
	key := func(tid, aid string) string {
		return fmt.Sprintf("shards/%d/%s", replShard, store.BlobName(tid, "m1", aid))
	}
	var tid, aid string
	replicatedAttachments(t, []string{"PROGRESSDB_ATTACHMENTS_URL=" + s3.URL}, func(_ *testNode, t2, a2 string) ([]byte, bool) {
		tid, aid = t2, a2
		obj, err := s3.Backend.GetObject(s3server.Bucket, key(tid, aid), nil)
		if err != nil {
			return nil, false
		}
		defer obj.Contents.Close()
		b, err := io.ReadAll(obj.Contents)
		return b, err == nil
	})
	res, err := s3.Backend.ListBucketVersions(s3server.Bucket, &gofakes3.Prefix{Prefix: key(tid, aid), HasPrefix: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	versions, markers := 0, 0
	for _, v := range res.Versions {
		switch v.(type) {
		case *gofakes3.Version:
			versions++
		case *gofakes3.DeleteMarker:
			markers++
		}
	}
	if versions != 1 || markers != 1 {
		t.Fatalf("the object has %d versions and %d delete markers, want one of each", versions, markers)
	}
}

// replShard is the shard the replicated attachments' tests use.
const replShard = 1

// replicatedAttachments runs an attachment's life on three replicated
// nodes, their store set by extra, blob reading a node's copy of it (a
// shared store's one copy). See TestReplicatedAttachmentsSurviveTheLeader.
func replicatedAttachments(t *testing.T, extra []string, blob func(node *testNode, tid, aid string) ([]byte, bool)) {
	ids := []string{"node-a", "node-b", "node-c"}
	extra = append([]string{"PROGRESSDB_RETENTION_MAX_MESSAGES=1"}, extra...)
	etcd, nodes := startReplicatedWith(t, ids, extra...)
	restart := func(n *testNode) *testNode {
		return startNodeWith(t, etcd, n.id, n.dir, append([]string{"PROGRESSDB_RETENTION_AUDIT_PATH=" + filepath.Join(n.dir, "audit")}, extra...)...)
	}
	const shard = replShard
	tid := threadIn(t, shard)
	if code, body := call(t, http.MethodPost, nodes[0].url()+"/v1/threads", fmt.Sprintf(`{"id":%q,"title":"x","author":"u"}`, tid), nil); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, body := call(t, http.MethodPost, nodes[0].url()+"/v1/threads/"+tid+"/messages", `{"id":"m1","author":"u","body":{"text":"x"}}`, nil); code != http.StatusCreated {
		t.Fatalf("append: %d %s", code, body)
	}
	leader := waitLeader(t, etcd, shard, 0)
	var lead, down, via *testNode // the leader's node, a follower stopped during the upload, the other
	for _, n := range nodes {
		switch {
		case n.id == leader.Node:
			lead = n
		case down == nil:
			down = n
		default:
			via = n
		}
	}
	down.shutdown()

	const marker = "UploadMarkerK4q"
	file := markedFile(2*(1<<20)+12345, marker) // three chunks
	code, body := call(t, http.MethodPost, via.url()+"/v1/threads/"+tid+"/messages/m1/attachments", string(file), nil)
	if code != http.StatusCreated {
		t.Fatalf("upload through %s: %d %s", via.id, code, body)
	}
	var att struct {
		ID string `json:"attachment_id"`
	}
	if err := json.Unmarshal(body, &att); err != nil || att.ID == "" {
		t.Fatalf("upload answer %s: %v", body, err)
	}
	// The replica down during the upload gets the bytes from the log.
	nodes = []*testNode{lead, via, restart(down)}
	path := "/v1/threads/" + tid + "/messages/m1/attachments/" + att.ID
	for _, n := range nodes {
		waitFor(t, func() bool {
			b, ok := blob(n, tid, att.ID)
			return ok && bytes.Equal(b, file)
		}, n.id+"'s copy of the blob")
		if code, got := retryCall(t, http.MethodGet, n.url()+path, "", nil); code != http.StatusOK || !bytes.Equal(got, file) {
			t.Fatalf("download through %s: %d, %d bytes of %d", n.id, code, len(got), len(file))
		}
	}

	// The leader's node stops: the next leader serves the file.
	lead.shutdown()
	next := waitLeader(t, etcd, shard, leader.Term)
	for _, n := range nodes[1:] {
		if code, got := retryCall(t, http.MethodGet, n.url()+path, "", nil); code != http.StatusOK || !bytes.Equal(got, file) {
			t.Fatalf("download through %s after %s stopped (leader %s): %d, %d bytes", n.id, leader.Node, next.Node, code, len(got))
		}
	}
	nodes[0] = restart(lead)

	// A newer message makes the run purge m1, and its attachment with it
	// on every replica.
	if code, body := retryCall(t, http.MethodPost, via.url()+"/v1/threads/"+tid+"/messages", `{"id":"m2","author":"u","body":{"text":"y"}}`, nil); code != http.StatusCreated {
		t.Fatalf("append m2: %d %s", code, body)
	}
	if part := runShard(t, via, shard); part.Result.Purged < 1 {
		t.Fatalf("the run purged nothing: %+v", part.Result)
	}
	for _, n := range nodes {
		waitFor(t, func() bool {
			_, ok := blob(n, tid, att.ID)
			return !ok
		}, "the purge of "+n.id+"'s copy of the blob")
		if code, _ := retryCall(t, http.MethodGet, n.url()+path, "", nil); code != http.StatusNotFound {
			t.Fatalf("download through %s after the purge: %d", n.id, code)
		}
	}
	waitErased(t, nodes, shard)
	for _, n := range nodes {
		n.shutdown()
	}
	for _, n := range nodes {
		storetest.RequireNone(t, n.dir, marker)
	}
}

// waitErased waits until no node counts a replica of shard n owing an
// erase (progressdb_cluster_erase_pending_replicas).
func waitErased(t *testing.T, nodes []*testNode, n int) {
	t.Helper()
	line := fmt.Sprintf("progressdb_cluster_erase_pending_replicas{shard=\"%d\"} 0", n)
	deadline := time.Now().Add(30 * time.Second)
	for _, node := range nodes {
		for {
			code, body := call(t, http.MethodGet, node.url()+"/metrics", "", nil)
			if code == http.StatusOK && strings.Contains(string(body), "\n"+line+"\n") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still counts replicas of shard %d owing an erase", node.id, n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// TestSnapshotCarriesTheBlobs: a replica that was down while its shard
// took an upload and purged another attachment catches up by snapshot
// (the purge dropped the log it lacked): the snapshot brings the new
// blob into its folder, the purged one leaves it, and no file of any
// node holds the purged file's bytes.
func TestSnapshotCarriesTheBlobs(t *testing.T) {
	extra := []string{"PROGRESSDB_RETENTION_MAX_MESSAGES=1"}
	etcd, nodes := startReplicatedWith(t, []string{"node-a", "node-b", "node-c"}, extra...)
	const shard = replShard
	tid := threadIn(t, shard)
	upload := func(via *testNode, mid string, file []byte) string {
		t.Helper()
		if code, body := retryCall(t, http.MethodPost, via.url()+"/v1/threads/"+tid+"/messages", fmt.Sprintf(`{"id":%q,"author":"u","body":{"text":"x"}}`, mid), nil); code != http.StatusCreated {
			t.Fatalf("append %s: %d %s", mid, code, body)
		}
		code, body := retryCall(t, http.MethodPost, via.url()+"/v1/threads/"+tid+"/messages/"+mid+"/attachments", string(file), nil)
		var att struct {
			ID string `json:"attachment_id"`
		}
		if code != http.StatusCreated || json.Unmarshal(body, &att) != nil {
			t.Fatalf("upload to %s: %d %s", mid, code, body)
		}
		return att.ID
	}
	if code, body := call(t, http.MethodPost, nodes[0].url()+"/v1/threads", fmt.Sprintf(`{"id":%q,"title":"x","author":"u"}`, tid), nil); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	const goneMarker = "PurgedFileMarkerZ8r"
	gone := markedFile(300<<10, goneMarker)
	goneID := upload(nodes[0], "m1", gone)
	for _, n := range nodes {
		waitFor(t, func() bool {
			b, err := os.ReadFile(replicaBlob(n, shard, tid, "m1", goneID))
			return err == nil && bytes.Equal(b, gone)
		},
			n.id+"'s copy of m1's file")
	}
	leader := waitLeader(t, etcd, shard, 0)
	var down, via *testNode
	for _, n := range nodes {
		switch {
		case n.id == leader.Node:
		case down == nil:
			down = n
		default:
			via = n
		}
	}
	down.shutdown()
	kept := markedFile(1<<20+777, "KeptFileMarkerJ3w")
	keptID := upload(via, "m2", kept)
	if part := runShard(t, via, shard); part.Result.Purged < 1 {
		t.Fatalf("the run purged nothing: %+v", part.Result)
	}
	for _, n := range nodes {
		if n != down {
			waitFor(t, func() bool { _, err := os.Stat(replicaBlob(n, shard, tid, "m1", goneID)); return os.IsNotExist(err) },
				"the purge of "+n.id+"'s copy of m1's file")
		}
	}

	back := startNodeWith(t, etcd, down.id, down.dir, append([]string{"PROGRESSDB_RETENTION_AUDIT_PATH=" + filepath.Join(down.dir, "audit")}, extra...)...)
	waitFor(t, func() bool {
		b, err := os.ReadFile(replicaBlob(back, shard, tid, "m2", keptID))
		_, gerr := os.Stat(replicaBlob(back, shard, tid, "m1", goneID))
		return err == nil && bytes.Equal(b, kept) && os.IsNotExist(gerr)
	}, down.id+"'s folder to hold m2's file and not m1's")
	running := []*testNode{back}
	for _, n := range nodes {
		if n != down {
			running = append(running, n)
		}
	}
	waitErased(t, running, shard)
	for _, n := range running {
		n.shutdown()
	}
	for _, n := range running {
		storetest.RequireNone(t, n.dir, goneMarker)
	}
	blobs := filepath.Dir(filepath.Dir(filepath.Dir(replicaBlob(back, shard, tid, "m1", goneID))))
	if _, err := os.Stat(blobs + ".snapshot"); !os.IsNotExist(err) {
		t.Errorf("the snapshot's unpacked blobs are left beside %s: %v", blobs, err)
	}
}

// TestReplicatedUploadLeftoversGoEverywhere: what a failed upload left
// in the replicas' folders goes from every one of them. An upload over
// the limit, sent without a declared size, had its first chunk on every
// replica when it was refused: its temporary file is deleted everywhere.
// An abandoned upload's temporary file (its leader died half way) is
// taken by the leader's orphan sweep after the grace period, and
// deleted from every replica's folder; one only the followers hold goes
// from theirs too, and a young one stays.
func TestReplicatedUploadLeftoversGoEverywhere(t *testing.T) {
	etcd, nodes := startReplicatedWith(t, []string{"node-a", "node-b", "node-c"},
		fmt.Sprintf("PROGRESSDB_ATTACHMENT_MAX_BYTES=%d", 1<<20+100))
	const shard = replShard
	tid := threadIn(t, shard)
	seedThread(t, nodes[0], tid)
	code, body := call(t, http.MethodPost, nodes[0].url()+"/v1/threads/"+tid+"/messages", `{"id":"m1","author":"u","body":{"text":"x"}}`, nil)
	if code != http.StatusCreated {
		t.Fatalf("append: %d %s", code, body)
	}
	folder := func(n *testNode) string {
		return filepath.Dir(replicaBlob(n, shard, tid, "m1", "x"))
	}
	temps := func(n *testNode) []string {
		m, _ := filepath.Glob(filepath.Join(folder(n), "*.tmp"))
		return m
	}
	// No declared size: the limit is found once more than a chunk came.
	file := markedFile(2<<20, "TooLargeMarkerV5e")
	req, err := http.NewRequest(http.MethodPost, nodes[1].url()+"/v1/threads/"+tid+"/messages/m1/attachments",
		io.MultiReader(bytes.NewReader(file)))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("an upload over the limit: %d %s", resp.StatusCode, got)
	}
	for _, n := range nodes {
		waitFor(t, func() bool { return len(temps(n)) == 0 }, "no temporary file in "+n.id+"'s folder")
	}

	// An abandoned upload's temporary file, older than the grace period,
	// on every replica; another only on the followers (the leader's copy
	// went without them: its deletion was in entries a snapshot
	// replaced), and a young one only on the followers.
	const abandoned = "01ABANDONEDUPLOAD0000000000.0123456789abcdef.tmp"
	const followersOnly = "01FOLLOWERSONLYUPLOAD000000.00112233445566ff.tmp"
	const young = "01YOUNGUPLOAD00000000000000.aabbccddeeff0011.tmp"
	leader := waitLeader(t, etcd, shard, 0)
	old := time.Now().Add(-25 * time.Hour)
	plant := func(n *testNode, name string, at time.Time) {
		p := filepath.Join(folder(n), name)
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("half an upload"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		plant(n, abandoned, old)
		if n.id != leader.Node {
			plant(n, followersOnly, old)
			plant(n, young, time.Now())
		}
	}
	part := runShard(t, nodes[2], shard)
	if part.Result == nil {
		t.Fatalf("the run: %+v", part)
	}
	for _, n := range nodes {
		waitFor(t, func() bool {
			left := temps(n)
			return len(left) == 0 || n.id != leader.Node && len(left) == 1 && filepath.Base(left[0]) == young
		}, "the old leftovers to leave "+n.id+"'s folder, and the young one to stay")
	}
}
