package replica_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// pruneState is a database folder whose state records one attachment,
// and a folder of blobs holding its blob, the blob of an attachment the
// state does not record (purged while the replica was behind), and an
// upload's temporary file.
type pruneState struct {
	dir, blobs             string
	kept, purged, leftover string // paths in blobs
}

func newPruneState(t *testing.T, dir, blobs string) pruneState {
	t.Helper()
	ctx := context.Background()
	s := must(store.Open(dir, store.Options{}))
	must(s.CreateThread(ctx, store.Thread{ID: "t", Title: "t", Author: "ann"}))
	must(s.AppendMessage(ctx, "t", store.Message{ID: "m1", Author: "ann", Body: body("m1")}))
	kept := must(s.NewAttachment(ctx, "t", "m1")).Attachment
	kept.Size, kept.SHA256, kept.ContentType = 4, "sha", "text/plain"
	must(s.AddAttachment(ctx, kept))
	purged := must(s.NewAttachment(ctx, "t", "m1")).Attachment // never recorded
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st := pruneState{dir: dir, blobs: blobs,
		kept:     filepath.Join(blobs, filepath.FromSlash(kept.BlobName())),
		purged:   filepath.Join(blobs, filepath.FromSlash(purged.BlobName())),
		leftover: filepath.Join(blobs, filepath.FromSlash(purged.BlobName())+".0011223344556677.tmp")}
	for _, p := range []string{st.kept, st.purged, st.leftover} {
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("blob"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// there reports which of the state's files are in its folder of blobs.
func (st pruneState) there() (kept, purged, leftover bool) {
	has := func(p string) bool { _, err := os.Stat(p); return err == nil }
	return has(st.kept), has(st.purged), has(st.leftover)
}

// A crash between a snapshot's install and its prune leaves the blobs
// purged while the replica was behind in its folder: RecoverFolder, run
// before the store opens, prunes them by the installed state's records
// once that state is in place (the swap completed, or finished by it),
// and not when the swap never began (the old state stays, and with it
// what its log will still delete). Recorded blobs and uploads' temporary
// files stay.
func TestRecoverFolderFinishesThePrune(t *testing.T) {
	cases := []struct {
		name       string
		setUp      func(t *testing.T, root string) pruneState
		wantPruned bool
	}{
		{"swapped, not pruned", func(t *testing.T, root string) pruneState {
			st := newPruneState(t, filepath.Join(root, "db"), filepath.Join(root, "blobs"))
			if err := replica.OwePrune(st.dir, st.blobs); err != nil {
				t.Fatal(err)
			}
			return st
		}, true},
		{"set aside, not swapped", func(t *testing.T, root string) pruneState {
			dir := filepath.Join(root, "db")
			st := newPruneState(t, dir+replica.StagedSuffix, filepath.Join(root, "blobs"))
			if err := replica.OwePrune(st.dir, st.blobs); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(dir+".replaced", 0o700); err != nil {
				t.Fatal(err)
			}
			st.dir = dir
			return st
		}, true},
		{"staged, never swapped", func(t *testing.T, root string) pruneState {
			dir := filepath.Join(root, "db")
			st := newPruneState(t, dir, filepath.Join(root, "blobs"))
			staged := dir + replica.StagedSuffix
			if err := os.Mkdir(staged, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := replica.OwePrune(staged, st.blobs); err != nil {
				t.Fatal(err)
			}
			return st
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.setUp(t, t.TempDir())
			for range 2 { // a crash in the recovery leaves it to do again
				if err := replica.RecoverFolder(st.dir); err != nil {
					t.Fatal(err)
				}
			}
			kept, purged, leftover := st.there()
			if !kept || !leftover || purged == tc.wantPruned {
				t.Errorf("after recovery: recorded blob there %v, purged blob there %v, leftover there %v", kept, purged, leftover)
			}
			if _, err := os.Stat(filepath.Join(st.dir, ".progressdb-snapshot-prune")); !os.IsNotExist(err) {
				t.Errorf("the prune's marker is left: %v", err)
			}
			s := must(store.Open(st.dir, store.Options{}))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
