package replica_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// newBlobCluster runs three nodes whose replicas keep their attachments
// in file:// folders of their own, with Config.LogMaxBytes maxBytes.
func newBlobCluster(t *testing.T, maxBytes int64, groups ...uint64) *testCluster {
	c := &testCluster{net: replica.NewLocal(), dir: t.TempDir(), groups: groups, nodes: make([]*node, 3),
		logMaxBytes: maxBytes, blobs: true}
	return c.run(t, nil)
}

// upload attaches file to message mid of thread tid through the serving
// leader's store, as the API does on a replicated shard (the bytes go
// through the log in chunks), trying again while a leadership changes
// under it (a loaded machine's pauses can depose a leader).
func (c *testCluster) upload(g uint64, tid, mid string, file []byte) store.Attachment {
	c.T.Helper()
	ctx := context.Background()
	for try := 0; ; try++ {
		l := c.servingLeader(g)
		blobs := must(attachments.Open(ctx, must(config.FileURL(c.blobsDir(l, g)))))
		a, err := blobs.Upload(ctx, c.nodes[l].store(g), attachments.Upload{Thread: tid, Message: mid,
			Body: bytes.NewReader(file), MaxBytes: 64 << 20, DeclaredSize: int64(len(file))})
		_ = blobs.Close()
		if err == nil {
			return a
		}
		if try == 10 || !errors.Is(err, attachments.ErrUnavailable) && !errors.Is(err, store.ErrNotLeader) && !errors.Is(err, store.ErrAmbiguous) {
			c.T.Fatalf("upload to %s: %v", mid, err)
		}
	}
}

// blobOn reads attachment a's blob in replica (g, i)'s folder.
func (c *testCluster) blobOn(i int, g uint64, a store.Attachment) ([]byte, error) {
	return os.ReadFile(filepath.Join(c.blobsDir(i, g), filepath.FromSlash(a.BlobName())))
}

// logSize is the bytes of every entry in replica (g, i)'s log.
func (c *testCluster) logSize(i int, g uint64) uint64 {
	c.T.Helper()
	l := c.raftLog(i, g)
	var n uint64
	for _, s := range must(l.EntrySizes(must(l.FirstIndex()), must(l.LastIndex())+1)) {
		n += s
	}
	return n
}

// randomFile is size bytes that do not compress.
func randomFile(size, seed int) []byte {
	r := rand.New(rand.NewPCG(uint64(seed), 7))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Uploads of several MiB through the log leave no replica's log holding
// more than LogMaxBytes of entries, and cut no live follower off: every
// replica gets every blob from the log, none by a snapshot.
func TestUploadsLeaveTheLogUnderItsBound(t *testing.T) {
	const bound = 2 << 20
	const g = 7
	c := newBlobCluster(t, bound, g)
	ctx := context.Background()
	st := c.nodes[c.servingLeader(g)].store(g)
	must(st.CreateThread(ctx, store.Thread{ID: "t", Title: "t", Author: "ann"}))
	var ids [3]string
	for i := range ids {
		ids[i] = c.databaseID(i, g)
	}
	files := map[string][]byte{}
	var atts []store.Attachment
	for k := range 5 {
		mid := fmt.Sprintf("m%d", k)
		must(c.nodes[c.servingLeader(g)].store(g).AppendMessage(ctx, "t", store.Message{ID: mid, Author: "ann", Body: body(mid)}))
		file := randomFile(3<<19+k*1000, k) // two chunks
		a := c.upload(g, "t", mid, file)
		files[a.ID] = file
		atts = append(atts, a)
	}
	c.caughtUp(g, c.servingLeader(g))
	for i := range c.nodes {
		if got := c.logSize(i, g); got > bound {
			t.Errorf("replica %d's log holds %d bytes of entries, over the bound %d", i, got, bound)
		}
		for _, a := range atts {
			if b, err := c.blobOn(i, g, a); err != nil || !bytes.Equal(b, files[a.ID]) {
				t.Errorf("replica %d's copy of %s: %d bytes, %v", i, a.ID, len(b), err)
			}
		}
		if got := c.databaseID(i, g); got != ids[i] {
			t.Errorf("replica %d was caught up by a snapshot (database %s, was %s): cut off while live", i, got, ids[i])
		}
	}
}
