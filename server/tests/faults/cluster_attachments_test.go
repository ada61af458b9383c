package faults

import (
	"bytes"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// shardBlobDir is shard n's folder of attachments on the node whose
// environment is env: <DB_PATH>-attachments/shards/<n>, the default.
func shardBlobDir(env envVars, n int) string {
	return filepath.Join(config.DefaultAttachmentsDir(env["PROGRESSDB_DB_PATH"]), "shards", strconv.Itoa(n))
}

// blobFiles lists the files named aid under dir, wherever they are.
func blobFiles(t testing.TB, dir, aid string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == aid {
			found = append(found, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestFaultClusterAttachments runs attachments on three sealed node
// processes (spec §11, §16): a file uploaded through a node that does not
// own its shard reads back byte for byte, whole and by range, through a
// third, and lands in its shard's folder on the owner; a purged message's
// blob leaves that folder and the shard's trail records it; the shard's
// backup, asked of a node that does not hold it, carries its blob; the
// shard moved to another node serves the file through the new owner and
// leaves none of its blobs on the old one; a subject erasure deletes the
// author's attachments on every shard. No file of any node, blob folders
// included, holds the files in clear.
func TestFaultClusterAttachments(t *testing.T) {
	t.Parallel()
	_, envs, nodes := startSealedCluster(t,
		"PROGRESSDB_RETENTION_ENABLED", "true",
		"PROGRESSDB_RETENTION_PERIOD", "1s",
		"PROGRESSDB_RETENTION_MESSAGE_PERIOD", "1s",
		"PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD", "true",
		"PROGRESSDB_RETENTION_CRON", "0 2 1 1 *",
		"PROGRESSDB_RETENTION_RUN_MISSED", "false")
	// Shard 0's home is node-1 (round robin); node-2 takes the uploads,
	// node-3 the downloads.
	tid := threadInShard(0, 0)
	chat(t, nodes[1], tid, "keep", "purge")
	file := bytes.Repeat([]byte(marker(tid, "file")+" "), 12000) // several sealed segments
	gone := []byte(marker(tid, "gone"))
	keep, err := upload(t, nodes[1], tid, "keep", bytes.NewReader(file))
	must(t, err)
	purged, err := upload(t, nodes[1], tid, "purge", bytes.NewReader(gone))
	must(t, err)

	path := "/v1/threads/" + tid + "/messages/keep/attachments/" + keep
	checkDownload := func(via *server) {
		t.Helper()
		if code, got := via.call(t, "GET", path, nil, ""); code != http.StatusOK || !bytes.Equal(got, file) {
			t.Fatalf("download through %s: %d, %d bytes of %d", via.url, code, len(got), len(file))
		}
		code, got := via.callWithHeader(t, "GET", path, "Range", "bytes=70000-70099")
		if code != http.StatusPartialContent || !bytes.Equal(got, file[70000:70100]) {
			t.Fatalf("range through %s: %d %q", via.url, code, got)
		}
	}
	checkDownload(nodes[2])
	owner := shardBlobDir(envs["node-1"], 0)
	if len(blobFiles(t, owner, keep)) != 1 || len(blobFiles(t, owner, purged)) != 1 {
		t.Fatalf("the blobs are not in shard 0's folder on node-1, %s", owner)
	}

	// The message purged: its blob leaves the folder, recorded in the
	// shard's trail.
	nodes[2].mustCall(t, "DELETE", "/v1/threads/"+tid+"/messages/purge", nil, "", http.StatusNoContent, nil)
	sleepUntil(time.Now().Add(1100 * time.Millisecond))
	runAllShards(t, nodes[0])
	if left := blobFiles(t, owner, purged); len(left) != 0 {
		t.Fatalf("the purged message's blob is still there: %v", left)
	}
	if items := attachmentItems(t, shardSite(envs["node-1"], 0))[purged]; len(items) != 1 {
		t.Fatalf("shard 0's trail records the purged blob %d times, want once", len(items))
	}

	// The shard's backup, asked of node-3, carries its blob.
	code, archive := nodes[2].call(t, "POST", "/admin/backups/stream?shard=0&compress=none", nil, adminToken)
	if code != http.StatusOK {
		t.Fatalf("backup of shard 0: %d %s", code, archive)
	}
	saved := filepath.Join(t.TempDir(), "shard-0.tar")
	must(t, os.WriteFile(saved, archive, 0o600))
	if a := verifyBackup(t, saved).Manifest.Attachments; a == nil || a.Store != "file" || a.Count != 1 {
		t.Fatalf("the backup of shard 0 holds attachments %+v, want its one blob", a)
	}

	// Moved to node-2, the file is served by its new owner; node-1 keeps
	// no blob of the shard.
	nodes[2].mustCall(t, "POST", "/admin/cluster/shards/0/move", map[string]string{"to": "node-2"}, adminToken, http.StatusOK, nil)
	checkDownload(nodes[1])
	checkDownload(nodes[0])
	if _, err := os.Stat(owner); !os.IsNotExist(err) {
		t.Errorf("node-1 keeps shard 0's folder of attachments: %v", err)
	}
	if left := blobFiles(t, nodeDir(envs["node-1"]), keep); len(left) != 0 {
		t.Errorf("node-1 keeps the moved shard's blob: %v", left)
	}
	if len(blobFiles(t, shardBlobDir(envs["node-2"], 0), keep)) != 1 {
		t.Errorf("the blob is not in shard 0's folder on node-2")
	}

	// A subject erasure takes the author's attachments on every shard,
	// each deleted by its shard's owner and recorded in its trail.
	const author = "attaching-author"
	erased := map[int]string{}
	markers := []string{marker(tid, "file"), marker(tid, "gone")}
	for n := range clusterShards {
		etid := threadInShard(n, 1)
		markers = append(markers, marker(etid, "erased"))
		chat(t, nodes[2], etid)
		nodes[2].mustCall(t, "POST", "/v1/threads/"+etid+"/messages", map[string]any{"id": "m", "author": author, "body": "x"},
			"", http.StatusCreated, nil)
		aid, err := upload(t, nodes[0], etid, "m", bytes.NewReader([]byte(marker(etid, "erased"))))
		must(t, err)
		erased[n] = aid
	}
	var acc retention.ErasureAccepted
	nodes[0].mustCall(t, "POST", "/admin/erasures", map[string]string{"author": author}, adminToken, http.StatusAccepted, &acc)
	waitFor(t, time.Minute, "the erasure to complete on every shard", func() bool {
		return clusterErasure(t, nodes[0], acc.ErasureID).Status == retention.ErasureCompleted
	})
	homes := map[int]string{0: "node-2", 1: "node-2", 2: "node-3"} // shard 0 moved
	for n, aid := range erased {
		env := envs[homes[n]]
		if left := blobFiles(t, shardBlobDir(env, n), aid); len(left) != 0 {
			t.Errorf("shard %d keeps the erased author's blob: %v", n, left)
		}
		if items := attachmentItems(t, shardSite(env, n))[aid]; len(items) != 1 {
			t.Errorf("shard %d's trail records the erased author's blob %d times, want once", n, len(items))
		}
	}

	// Sealed: no file of any node holds any of the files in clear.
	for i, n := range nodes {
		if code := n.stop(t); code != 0 {
			t.Fatalf("node %s stopped with %d\n%s", clusterIDs[i], code, n.output())
		}
	}
	for _, id := range clusterIDs {
		storetest.RequireNone(t, nodeDir(envs[id]), markers...)
	}
}
