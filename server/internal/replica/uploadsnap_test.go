package replica_test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// An upload under way when a follower catches up by snapshot reaches
// that follower whole: the snapshot's state stands after the upload's
// first chunk, so the follower lacks it and skips the later ones, and
// the leader, which took the snapshot's checkpoint meanwhile, sends the
// upload again once its record applied. Every replica then holds the
// blob byte for byte.
func TestUploadUnderWayDuringASnapshot(t *testing.T) {
	const g = 8
	c := newBlobCluster(t, 1<<20, g) // a chunk passes the bound: the log drops it
	ctx := context.Background()
	l := c.servingLeader(g)
	st := c.nodes[l].store(g)
	must(st.CreateThread(ctx, store.Thread{ID: "t", Title: "t", Author: "ann"}))
	must(st.AppendMessage(ctx, "t", store.Message{ID: "m1", Author: "ann", Body: body("m1")}))
	c.caughtUp(g, l)
	f := (l + 1) % 3
	before, had := c.databaseID(f, g), c.raftLog(f, g).Applied()
	c.stop(f)

	file := randomFile(2<<20+333, 3) // three chunks
	blobs := must(attachments.Open(ctx, must(config.FileURL(c.blobsDir(l, g)))))
	defer blobs.Close()
	body, feed := io.Pipe()
	type result struct {
		a   store.Attachment
		err error
	}
	done := make(chan result, 1)
	go func() {
		a, err := blobs.Upload(ctx, st, attachments.Upload{Thread: "t", Message: "m1", Body: body,
			MaxBytes: 64 << 20, DeclaredSize: -1})
		done <- result{a, err}
	}()
	// The first chunk applied on the leader (the upload read past it),
	// and the leader's log no longer holds what the stopped follower
	// lacks: it comes back by a snapshot taken in the middle of the upload.
	must(feed.Write(file[:3<<19]))
	var first uint64
	c.WaitFor("the leader's log to drop what the stopped follower lacks", func() bool {
		first = must(c.raftLog(l, g).FirstIndex())
		return first > had+1
	})
	c.start(f)
	c.WaitFor("the follower to catch up by snapshot", func() bool {
		return c.raftLog(f, g).Applied() >= first
	})
	must(feed.Write(file[3<<19:]))
	if err := feed.Close(); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil {
		t.Fatalf("the upload: %v", res.err)
	}
	c.caughtUp(g, l)
	if c.databaseID(f, g) == before {
		t.Fatal("the follower caught up from the log, not by snapshot")
	}
	for i := range c.nodes {
		c.WaitFor("every replica's copy of the blob", func() bool {
			b, err := c.blobOn(i, g, res.a)
			return err == nil && bytes.Equal(b, file)
		})
	}
}
