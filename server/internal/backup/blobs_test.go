package backup

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// blobWorld is a world whose runner and creator have a file:// blob
// store beside the database, as app.Stores wires them.
func newBlobWorld(t *testing.T) (*world, *attachments.Blobs) {
	t.Helper()
	w := newWorld(t, false)
	blobs := openBlobs(t, config.DefaultAttachmentsDir(w.dbPath))
	var err error
	w.runner, err = retention.NewRunner(retention.RunnerOptions{Store: w.st, Config: w.cfg, Blobs: blobs,
		Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return w.now }, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	w.creator, err = NewCreator(Options{Store: w.st, Hold: w.runner, Blobs: blobs, Version: "test",
		Path: filepath.Join(w.dir, "backups")})
	if err != nil {
		t.Fatal(err)
	}
	return w, blobs
}

func openBlobs(t *testing.T, dir string) *attachments.Blobs {
	t.Helper()
	u, err := config.FileURL(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := attachments.Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// attach uploads size random bytes to message mid of thread tid.
func attach(t *testing.T, st *store.Store, blobs *attachments.Blobs, tid, mid string, size int) (store.Attachment, []byte) {
	t.Helper()
	body := make([]byte, size)
	_, _ = rand.Read(body)
	a, err := blobs.Upload(context.Background(), st, attachments.Upload{Thread: tid, Message: mid,
		Body: bytes.NewReader(body), MaxBytes: 1 << 30, DeclaredSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	return a, body
}

// download reads attachment a of st whole.
func download(t *testing.T, st *store.Store, blobs *attachments.Blobs, a store.Attachment) []byte {
	t.Helper()
	a, err := st.GetAttachment(context.Background(), a.Thread, a.Message, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	r, err := blobs.OpenRange(context.Background(), st, a, 0, a.Size)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBackupHoldsBlobsThroughAPurge: a backup of a file:// store holds
// the blobs the checkpoint's records name, listed in the manifest, even
// one whose attachment a run purges between the checkpoint and its copy
// (the run deletes the blob once the backup has copied it). Verify
// checks them; a restore puts them beside the copy, byte for byte, and
// its replay repeats the purge, deleting the restored blob, recorded
// replayed.
func TestBackupHoldsBlobsThroughAPurge(t *testing.T) {
	ctx := context.Background()
	w, blobs := newBlobWorld(t)
	w.thread("t1", 2)
	w.thread("t2", 1)
	kept, keptBody := attach(t, w.st, blobs, "t1", "t1-m0", 200<<10)
	other, otherBody := attach(t, w.st, blobs, "t2", "t2-m0", 1)
	purged, _ := attach(t, w.st, blobs, "t1", "t1-m1", 70<<10)
	w.run() // the trail exists, as a restore needs
	if _, err := w.st.DeleteMessage(ctx, "t1", "t1-m1"); err != nil {
		t.Fatal(err)
	}
	w.now = w.now.Add(31 * day)

	// Between the checkpoint and the copy of its blob, a run purges the
	// message: its record goes now; its blob waits for the copy.
	runDone := make(chan error, 1)
	w.creator.afterCheckpoint = func() {
		go func() {
			res, err := w.runner.Run(ctx, retention.RunRequest{Trigger: "cli"})
			if err == nil && res.Purged == 0 {
				err = errors.New("the run purged nothing")
			}
			runDone <- err
		}()
		// Until its record is gone and the run deletes its blob: the
		// delete waits for the copy (or, without that wait, is done).
		for {
			_, err := w.st.GetAttachment(ctx, "t1", "t1-m1", purged.ID)
			there, xerr := blobs.Exists(ctx, purged.BlobName())
			if xerr != nil {
				t.Error(xerr)
				return
			}
			if errors.Is(err, store.ErrNotFound) && (!there || blobs.DeletesWaiting() > 0) {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	m, file, err := w.creator.CreateInPath(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-runDone; err != nil {
		t.Fatalf("the purge during the backup: %v", err)
	}
	if ok, err := blobs.Exists(ctx, purged.BlobName()); err != nil || ok {
		t.Fatalf("the purged attachment's blob is still in the store after the run (%v)", err)
	}
	a := m.Attachments
	if a == nil || a.Store != "file" || a.Count != 3 || len(a.Missing) != 0 {
		t.Fatalf("manifest attachments %+v: want 3 blobs of a file:// store, none missing", a)
	}
	listed := map[string]int64{}
	for _, f := range m.Files {
		if name, ok := blobName(f.Name); ok {
			listed[name] = f.Size
		}
	}
	for _, att := range []store.Attachment{kept, other, purged} {
		if _, ok := listed[att.BlobName()]; !ok {
			t.Errorf("the manifest lists no file for blob %s: %v", att.BlobName(), listed)
		}
	}
	if rep, err := Verify(ctx, file, nil, t.TempDir()); err != nil || !rep.Valid {
		t.Fatalf("verify: %v %+v", err, rep.Problems)
	}

	db := filepath.Join(w.dir, "restored")
	restored := config.DefaultAttachmentsDir(db)
	o := w.restoreOptions(file, db)
	o.NewReplayer = func(st *store.Store, rc config.Retention) (Replayer, error) {
		r, err := retention.NewRunner(retention.RunnerOptions{Store: st, Config: rc, Logger: slog.New(slog.DiscardHandler),
			Now: func() time.Time { return w.now }, Version: "test", Blobs: openBlobs(t, restored)})
		return testReplayer{r}, err
	}
	res, err := Restore(ctx, o)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if res.Attachments != restored || res.Replay == nil || res.Replay.Purged == 0 {
		t.Fatalf("restore: attachments %q, replay %+v: want blobs in %s and the purge replayed", res.Attachments, res.Replay, restored)
	}
	if _, err := os.Stat(filepath.Join(restored, filepath.FromSlash(purged.BlobName()))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the blob purged after the backup is in the restored folder after the replay (%v)", err)
	}
	if !replayedBlob(t, res.Replay.AuditFile, purged.ID) {
		t.Errorf("the replay's audit file records no replayed attachment %s", purged.ID)
	}
	st, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rb := openBlobs(t, restored)
	if got := download(t, st, rb, kept); !bytes.Equal(got, keptBody) {
		t.Errorf("restored attachment %s: %d bytes, not the %d uploaded", kept.ID, len(got), len(keptBody))
	}
	if got := download(t, st, rb, other); !bytes.Equal(got, otherBody) {
		t.Errorf("restored attachment %s differs", other.ID)
	}
}

// replayedBlob reports whether the audit file at path records
// attachment id purged with replayed: true.
func replayedBlob(t *testing.T, path, id string) bool {
	t.Helper()
	found := false
	err := audit.Purged(path, func(it audit.Item) error {
		found = found || (it.ItemType == audit.ItemAttachment && it.ItemID == id && it.Replayed)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// A blob missing from the store when the backup is taken (deleted by
// hand) is listed missing: verify passes and counts it, and a restore
// restores its record without bytes and the other blobs whole. A
// restore into an attachments folder that is not empty is refused,
// nothing touched, unless forced.
func TestBackupOfAMissingBlob(t *testing.T) {
	ctx := context.Background()
	w, blobs := newBlobWorld(t)
	w.thread("t1", 2)
	lost, _ := attach(t, w.st, blobs, "t1", "t1-m0", 10)
	kept, keptBody := attach(t, w.st, blobs, "t1", "t1-m1", 10)
	w.run()
	if err := os.Remove(filepath.Join(config.DefaultAttachmentsDir(w.dbPath), filepath.FromSlash(lost.BlobName()))); err != nil {
		t.Fatal(err)
	}
	m, file, err := w.creator.CreateInPath(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a := m.Attachments; a == nil || a.Count != 2 || len(a.Missing) != 1 || a.Missing[0] != lost.BlobName() {
		t.Fatalf("manifest attachments %+v: want 2, %s missing", a, lost.BlobName())
	}
	rep, err := Verify(ctx, file, nil, t.TempDir())
	if err != nil || !rep.Valid || len(rep.Manifest.Attachments.Missing) != 1 {
		t.Fatalf("verify: %v %+v", err, rep)
	}

	db := filepath.Join(w.dir, "restored")
	folder := filepath.Join(w.dir, "files")
	if err := os.MkdirAll(folder, 0o750); err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(folder, "stray")
	if err := os.WriteFile(stray, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := w.restoreOptions(file, db)
	o.Attachments = folder
	if _, err := Restore(ctx, o); !errors.Is(err, ErrRefused) {
		t.Fatalf("restore into a folder that is not empty: %v, want ErrRefused", err)
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused restore made %s (%v)", db, err)
	}
	o.ForceAttachments = true
	res, err := Restore(ctx, o)
	if err != nil || res.Attachments != folder {
		t.Fatalf("forced restore: %v, attachments %q", err, res.Attachments)
	}
	if _, err := os.Stat(stray); err != nil {
		t.Fatalf("a forced restore removed a file of the folder: %v", err)
	}
	st, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rb := openBlobs(t, folder)
	if got := download(t, st, rb, kept); !bytes.Equal(got, keptBody) {
		t.Errorf("restored attachment %s differs", kept.ID)
	}
	a, err := st.GetAttachment(ctx, "t1", "t1-m0", lost.ID)
	if err != nil {
		t.Fatalf("the missing blob's record: %v", err)
	}
	if _, err := rb.OpenRange(ctx, st, a, 0, a.Size); !errors.Is(err, attachments.ErrBlobMissing) {
		t.Fatalf("download of the missing blob: %v, want ErrBlobMissing", err)
	}
}

// CheckRemoteBlobs opens the store only for a valid backup of a remote
// one, and a store that cannot be opened is a problem, never a pass.
func TestCheckRemoteBlobsOpensOnlyWhenNeeded(t *testing.T) {
	remote := &Attachments{Store: "s3", Count: 1, Blobs: []Blob{{Name: "t1/m1/a1", Size: 3}}}
	down := errors.New("no route to the bucket")
	for _, tc := range []struct {
		name     string
		att      *Attachments
		valid    bool
		wantOpen bool
	}{
		{"no attachments", nil, true, false},
		{"file store", &Attachments{Store: "file"}, true, false},
		{"invalid already", remote, false, false},
		{"remote", remote, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Report{Valid: tc.valid, Manifest: Manifest{Attachments: tc.att}}
			opened := false
			CheckRemoteBlobs(context.Background(), &rep, func(context.Context) (*attachments.Blobs, error) {
				opened = true
				return nil, down
			})
			if opened != tc.wantOpen {
				t.Fatalf("opened %t, want %t", opened, tc.wantOpen)
			}
			if tc.wantOpen && (rep.Valid || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], down.Error())) {
				t.Fatalf("a store that cannot be opened: valid %t, problems %q", rep.Valid, rep.Problems)
			}
			if !tc.wantOpen && rep.Valid != tc.valid {
				t.Fatalf("valid changed to %t", rep.Valid)
			}
		})
	}
}
