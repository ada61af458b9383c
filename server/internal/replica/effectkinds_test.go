package replica_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// The effect crash cases of the key store and of attachments (the
// harness and the audit trail's: effectcrash_test.go).

// keyThread is the thread whose key (ann's) the key store cases create
// and destroy.
const keyThread = "keykill-thread"

// keyCreateCase kills the follower after the op that creates ann's key
// of keyThread: every replica then holds the key once, and opens the
// thread's sealed title with it.
func keyCreateCase() effectCase {
	const g = effectCrashGroup
	return effectCase{kind: store.EffectKeys, sealed: true,
		run: func(c *testCluster, l int, arm func()) {
			arm()
			must(c.nodes[l].store(g).CreateThread(context.Background(), store.Thread{ID: keyThread, Title: "sealed title", Author: "ann"}))
			fmt.Printf("note key %s\n", keyValue(c.nodes[l].store(g)))
		},
		stall: func(_ []byte, n int) bool { return n == 1 },
		made: func(t *testing.T, c *testCluster, f int, _ map[string]string) {
			followerKeysAre(t, c, f, "ann [{keykill-thread 1}] erasures []", "the op's")
		},
		again: func(t *testing.T, c *testCluster, f int, notes map[string]string) {
			for i, nd := range c.nodes {
				if got := keyState(t, keyStoreOf(nd.store(g))); got != "ann [{keykill-thread 1}] erasures []" {
					t.Errorf("replica %d's key store holds %q, want ann's key once", i, got)
				}
				if th, err := nd.store(g).GetThread(context.Background(), keyThread); err != nil || th.Title != "sealed title" {
					t.Errorf("replica %d reads the thread as %+v (%v)", i, th, err)
				}
			}
			// What the destroy case looks for is found while the key is.
			stopAll(c)
			storetest.RequireAll(t, c.keyStore(f, g), mustHex(notes["key"]))
		},
	}
}

// keyDestroyCase kills the follower after the op that destroys the keys
// of keyThread (a purge: ProposeDestroy): no replica holds the key, and
// once each erased its key store, the key is in none of its files.
func keyDestroyCase() effectCase {
	const g = effectCrashGroup
	return effectCase{kind: store.EffectKeys, sealed: true,
		run: func(c *testCluster, l int, arm func()) {
			ctx := context.Background()
			s := c.nodes[l].store(g)
			must(s.CreateThread(ctx, store.Thread{ID: keyThread, Title: "sealed title", Author: "ann"}))
			c.sameEverywhere(g, l) // the key's op came before the thread's command
			fmt.Printf("note key %s\n", keyValue(s))
			arm()
			if n := must(keyStoreOf(s).DestroyThread(ctx, keyThread)); n != 1 {
				panic(fmt.Sprintf("destroyed %d keys, want 1", n))
			}
		},
		stall: func(_ []byte, n int) bool { return n == 1 },
		made: func(t *testing.T, c *testCluster, f int, _ map[string]string) {
			followerKeysAre(t, c, f, "ann [] erasures []", "the destroy's")
		},
		again: func(t *testing.T, c *testCluster, _ int, notes map[string]string) {
			ctx := context.Background()
			for i, nd := range c.nodes {
				ks := keyStoreOf(nd.store(g))
				if got := keyState(t, ks); got != "ann [] erasures []" {
					t.Errorf("replica %d's key store holds %q, want no key", i, got)
				}
				c.WaitFor(fmt.Sprintf("replica %d's key store to be erased", i), func() bool { return must(ks.Erased(ctx)) })
			}
			stopAll(c)
			for i := range c.nodes {
				storetest.RequireNone(t, filepath.Join(c.dir, fmt.Sprintf("node%d", i)), mustHex(notes["key"]))
			}
		},
	}
}

// keyValue reads what ann's key of keyThread is stored as in the key
// store of s (the author's HMAC and the wrapped DEK, the same bytes on
// every replica) from a checkpoint, removed at once, and returns it in
// hex.
func keyValue(s *store.Store) string {
	ks := keyStoreOf(s)
	dir := must(ks.Checkpoint(context.Background(), "probe"))
	defer func() { must(struct{}{}, ks.RemoveCheckpoint(dir)) }()
	db := must(pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: storetest.Quiet{}}))
	defer db.Close()
	v, closer, err := db.Get([]byte("k:" + keyThread + ":k:0000000001"))
	must(struct{}{}, err)
	defer closer.Close()
	return hex.EncodeToString(v)
}

func mustHex(s string) string { return string(must(hex.DecodeString(s))) }

// openStore opens replica (g, i)'s store on its own, sealed as the
// cluster's are.
func (c *testCluster) openStore(i int, g uint64) (*store.Store, error) {
	return store.Open(c.folder(i, g), c.options(c.folder(i, g), c.keyStore(i, g), ""))
}

// stopAll stops the nodes, so that their folders are scanned whole: a
// running store may be writing a table.
func stopAll(c *testCluster) {
	for i := range c.nodes {
		c.stop(i)
	}
}

// keyStoreOf is a sealed replica's key store.
func keyStoreOf(s *store.Store) *keystore.KeyStore { return s.KeySealer().(*keystore.KeyStore) }

// keyState is what a key store holds of ann, for comparison.
func keyState(t *testing.T, ks *keystore.KeyStore) string {
	t.Helper()
	ctx := context.Background()
	refs, err := ks.AuthorKeys(ctx, "ann")
	if err != nil {
		t.Fatal(err)
	}
	pending, err := ks.PendingErasures(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("ann %v erasures %v", refs, pending)
}

// blobLines is the upload of the chunk case: two chunks (each a
// command), every line numbered, so that no part reads as another.
var blobLines = func() []byte {
	var b []byte
	for k := 0; len(b) < attachments.ChunkSize+64<<10; k++ {
		b = fmt.Appendf(b, "chunk-line %012d\n", k)
	}
	return b
}()

// deletedBlob is the upload of the deletion case.
var deletedBlob = bytes.Repeat([]byte("deleted-blob-bytes\n"), 4000)

// blobChunkCase kills the follower after the second chunk of an upload,
// written at its offset into the file the first began: every replica
// then holds the blob whole, and no temporary file.
func blobChunkCase() effectCase {
	const g = effectCrashGroup
	return effectCase{kind: store.EffectBlobs, blobs: true,
		run: func(c *testCluster, l int, arm func()) {
			mid := c.blobMessage(l)
			arm()
			fmt.Printf("note blob %s\n", c.upload(g, "files", mid, blobLines).BlobName())
		},
		stall: func(_ []byte, n int) bool { return n == 2 },
		made: func(t *testing.T, c *testCluster, f int, notes map[string]string) {
			files := blobFiles(t, c.blobsDir(f, g))
			var temps []string
			for name, size := range files {
				if strings.HasSuffix(name, ".tmp") && size == int64(len(blobLines)) {
					temps = append(temps, name)
				}
			}
			if len(temps) != 1 || len(files) != 1 {
				t.Fatalf("the killed follower's blob folder holds %v: its second chunk was not written", files)
			}
		},
		again: func(t *testing.T, c *testCluster, _ int, notes map[string]string) {
			name := notes["blob"]
			for i := range c.nodes {
				c.WaitFor(fmt.Sprintf("replica %d's blob", i), func() bool {
					_, err := os.Stat(filepath.Join(c.blobsDir(i, g), name))
					return err == nil
				})
				if got, err := os.ReadFile(filepath.Join(c.blobsDir(i, g), name)); err != nil || !bytes.Equal(got, blobLines) {
					t.Errorf("replica %d's blob %s: %d bytes of %d (%v)", i, name, len(got), len(blobLines), err)
				}
				if files := blobFiles(t, c.blobsDir(i, g)); len(files) != 1 {
					t.Errorf("replica %d's blob folder holds %v, want the blob alone", i, files)
				}
			}
		},
	}
}

// blobDeleteCase kills the follower after an attachment's deletion: no
// replica holds the blob then, nor its bytes in any file of its folder.
func blobDeleteCase() effectCase {
	const g = effectCrashGroup
	return effectCase{kind: store.EffectBlobs, blobs: true,
		run: func(c *testCluster, l int, arm func()) {
			name := c.upload(g, "files", c.blobMessage(l), deletedBlob).BlobName()
			fmt.Printf("note blob %s\n", name)
			c.WaitFor("every replica's blob", func() bool {
				for i := range c.nodes {
					if _, err := os.Stat(filepath.Join(c.blobsDir(i, g), name)); err != nil {
						return false
					}
				}
				return true
			})
			arm()
			ctx := context.Background()
			b := must(attachments.Open(ctx, must(config.FileURL(c.blobsDir(l, g)))))
			defer b.Close()
			if err := b.Of(c.nodes[l].store(g)).Delete(ctx, name); err != nil {
				panic(err)
			}
		},
		stall: func(_ []byte, n int) bool { return n == 1 },
		made: func(t *testing.T, c *testCluster, f int, notes map[string]string) {
			if files := blobFiles(t, c.blobsDir(f, g)); len(files) != 0 {
				t.Fatalf("the killed follower's blob folder holds %v: the deletion was not made", files)
			}
		},
		again: func(t *testing.T, c *testCluster, _ int, _ map[string]string) {
			for i := range c.nodes {
				if files := blobFiles(t, c.blobsDir(i, g)); len(files) != 0 {
					t.Errorf("replica %d's blob folder holds %v after the deletion", i, files)
				}
				storetest.RequireNone(t, c.blobsDir(i, g), string(deletedBlob[:19]))
			}
		},
	}
}

// blobMessage makes a thread and a message to attach to, through the
// leader l, and returns the message's ID.
func (c *testCluster) blobMessage(l int) string {
	ctx := context.Background()
	s := c.nodes[l].store(effectCrashGroup)
	must(s.CreateThread(ctx, store.Thread{ID: "files", Title: "t", Author: "ann"}))
	return must(s.AppendMessage(ctx, "files", store.Message{Author: "ann", Body: body("with a file")})).ID
}

// blobFiles lists the files under a blob folder (none while it does not
// exist) with their sizes.
func blobFiles(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out[filepath.ToSlash(strings.TrimPrefix(p, dir+string(filepath.Separator)))] = info.Size()
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}

// followerKeysAre checks the killed follower f's key store, reopened,
// against want: what the effect of the op named what leaves.
func followerKeysAre(t *testing.T, c *testCluster, f int, want, what string) {
	t.Helper()
	s, err := c.openStore(f, effectCrashGroup)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := keyState(t, keyStoreOf(s)); got != want {
		t.Fatalf("the killed follower's key store holds %q: %s effect was not made", got, what)
	}
}
