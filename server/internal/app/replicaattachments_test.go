package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster"
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

// retryCall calls until the answer is not a 503 (a leader being
// elected, or not yet serving its term), for at most 30 s.
func retryCall(t *testing.T, method, url, body string, h http.Header) (int, []byte) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, got := call(t, method, url, body, h)
		if code != http.StatusServiceUnavailable && code != http.StatusMisdirectedRequest || time.Now().After(deadline) {
			return code, got
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitFile waits until path holds want (nil: until it is gone).
func waitFile(t *testing.T, path string, want []byte) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := os.ReadFile(path)
		if want == nil && os.IsNotExist(err) || want != nil && err == nil && bytes.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d bytes (want %d), %v", path, len(got), len(want), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReplicatedAttachmentsSurviveTheLeader: on a replicated cluster
// with the default file:// store, an upload's bytes reach every
// replica's folder through the log: a replica down during the upload
// gets them when it returns, every node serves the file byte for byte,
// and after the leader's node stops the next leader serves it from its
// own folder. A purge deletes the blob from every replica's folder, and
// no file of any node (data, log, blobs) holds its bytes afterwards.
func TestReplicatedAttachmentsSurviveTheLeader(t *testing.T) {
	ids := []string{"node-a", "node-b", "node-c"}
	extra := []string{"PROGRESSDB_RETENTION_MAX_MESSAGES=1"}
	etcd, nodes := startReplicatedWith(t, ids, extra...)
	const shard = 1
	tid := threadIn(t, shard)
	if code, body := call(t, http.MethodPost, nodes[0].url()+"/v1/threads", fmt.Sprintf(`{"id":%q,"title":"x","author":"u"}`, tid), nil); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, body := call(t, http.MethodPost, nodes[0].url()+"/v1/threads/"+tid+"/messages", `{"id":"m1","author":"u","body":{"text":"x"}}`, nil); code != http.StatusCreated {
		t.Fatalf("append: %d %s", code, body)
	}
	leader := waitLeader(t, etcd, shard, 0)
	byID := map[string]*testNode{}
	for _, n := range nodes {
		byID[n.id] = n
	}
	var down, via *testNode // a follower stopped during the upload, and another node
	for _, n := range nodes {
		switch {
		case n.id != leader.Node && down == nil:
			down = n
		case n.id != leader.Node:
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
	back := startNodeWith(t, etcd, down.id, down.dir, append([]string{"PROGRESSDB_RETENTION_AUDIT_PATH=" + filepath.Join(down.dir, "audit")}, extra...)...)
	nodes = []*testNode{byID[leader.Node], via, back}
	path := "/v1/threads/" + tid + "/messages/m1/attachments/" + att.ID
	for _, n := range nodes {
		waitFile(t, replicaBlob(n, shard, tid, "m1", att.ID), file)
		if code, got := retryCall(t, http.MethodGet, n.url()+path, "", nil); code != http.StatusOK || !bytes.Equal(got, file) {
			t.Fatalf("download through %s: %d, %d bytes of %d", n.id, code, len(got), len(file))
		}
	}

	// The leader's node stops: the next leader serves the file.
	nodes[0].shutdown()
	next := waitLeader(t, etcd, shard, leader.Term)
	for _, n := range nodes[1:] {
		if code, got := retryCall(t, http.MethodGet, n.url()+path, "", nil); code != http.StatusOK || !bytes.Equal(got, file) {
			t.Fatalf("download through %s after %s stopped (leader %s): %d, %d bytes", n.id, leader.Node, next.Node, code, len(got))
		}
	}
	old := nodes[0]
	nodes[0] = startNodeWith(t, etcd, old.id, old.dir, append([]string{"PROGRESSDB_RETENTION_AUDIT_PATH=" + filepath.Join(old.dir, "audit")}, extra...)...)

	// A newer message makes the run purge m1, and its attachment with it
	// on every replica.
	if code, body := retryCall(t, http.MethodPost, via.url()+"/v1/threads/"+tid+"/messages", `{"id":"m2","author":"u","body":{"text":"y"}}`, nil); code != http.StatusCreated {
		t.Fatalf("append m2: %d %s", code, body)
	}
	if part := runShard(t, via, shard); part.Result.Purged < 1 {
		t.Fatalf("the run purged nothing: %+v", part.Result)
	}
	for _, n := range nodes {
		waitFile(t, replicaBlob(n, shard, tid, "m1", att.ID), nil)
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
