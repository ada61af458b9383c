package replica_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/testtools"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// envPruneDir is the folder of TestPruneCrashHelper's nodes.
const envPruneDir = "PROGRESSDB_REPLICA_PRUNE_DIR"

// pruneCrashGroup is the helper's group.
const pruneCrashGroup = 2

// TestPruneCrashHelper is the process TestSnapshotPruneSurvivesKill9
// kills: three nodes over Local with file:// folders of blobs, two
// threads with an attachment each, a follower stopped while the other
// thread is purged (its blob deleted, the log dropped up to the purge),
// then started again with a folder that stops once the snapshot's state
// took the folder's place, before its prune.
func TestPruneCrashHelper(t *testing.T) {
	dir := os.Getenv(envPruneDir)
	if dir == "" {
		return // only as TestSnapshotPruneSurvivesKill9's process
	}
	const g = pruneCrashGroup
	ctx := context.Background()
	c := &testCluster{net: replica.NewLocal(), dir: dir, groups: []uint64{g}, nodes: make([]*node, 3), blobs: true}
	c.run(t, nil)
	s := c.nodes[c.servingLeader(g)].store(g)
	var atts []store.Attachment
	for _, tid := range []string{"kept", "gone"} {
		must(s.CreateThread(ctx, store.Thread{ID: tid, Title: tid, Author: "ann"}))
		must(s.AppendMessage(ctx, tid, store.Message{ID: tid + "-m", Author: "ann", Body: body(tid)}))
		atts = append(atts, c.upload(g, tid, tid+"-m", randomFile(300<<10, len(atts))))
	}
	l := c.servingLeader(g)
	c.caughtUp(g, l)
	f := (l + 1) % 3
	c.stop(f)
	s = c.nodes[l].store(g)
	must(s.DeleteThread(ctx, "gone"))
	purge(t, s, "gone")
	blobs := must(attachments.Open(ctx, must(config.FileURL(c.blobsDir(l, g)))))
	if err := blobs.Of(s).Delete(ctx, atts[1].BlobName()); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("follower %d\nkept %s\ngone %s\n", f, atts[0].BlobName(), atts[1].BlobName())
	c.hook = func(node int, point string) {
		if node == f && point == "reopen" {
			fmt.Println("at reopen")
			select {}
		}
	}
	c.start(f)
	select {}
}

// A follower killed (SIGKILL) once a snapshot's state took its folder's
// place and before the blobs purged while it was behind left its folder
// of blobs: RecoverFolder, as the node runs it before it opens the
// shard, prunes them, and keeps the blob the state records.
func TestSnapshotPruneSurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	child := testtools.StartChild(t, "TestPruneCrashHelper", envPruneDir+"="+dir)
	f, names := -1, map[string]string{}
	for {
		line, ok := child.Line()
		if !ok {
			t.Fatal("the helper ended before it reached the prune")
		}
		if n, found := strings.CutPrefix(line, "follower "); found {
			f, _ = strconv.Atoi(n)
		}
		if k, v, found := strings.Cut(line, " "); found && (k == "kept" || k == "gone") {
			names[k] = v
		}
		if line == "at reopen" {
			break
		}
	}
	child.Kill()
	c := &testCluster{dir: dir, blobs: true}
	blob := func(k string) bool {
		_, err := os.Stat(filepath.Join(c.blobsDir(f, pruneCrashGroup), filepath.FromSlash(names[k])))
		return err == nil
	}
	if !blob("gone") {
		t.Fatal("the purged blob left the follower's folder before the kill: nothing to recover")
	}
	folder := c.folder(f, pruneCrashGroup)
	if err := replica.RecoverFolder(folder); err != nil {
		t.Fatal(err)
	}
	if blob("gone") || !blob("kept") {
		t.Fatalf("after recovery: the purged blob there %v, the recorded one %v", blob("gone"), blob("kept"))
	}
	s, err := store.Open(folder, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ok := must(s.HasAttachmentRecord(context.Background(), "gone", "gone-m", filepath.Base(names["gone"]))); ok {
		t.Fatal("the recovered state records the purged attachment")
	}
}
