package retention

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// plant writes an object into the blob folder as a killed upload would
// leave it, last written at mtime.
func (e *env) plant(name string, body []byte, mtime time.Time) string {
	e.t.Helper()
	p := filepath.Join(e.dir, "blobs", filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, body, 0o640); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func gone(t *testing.T, p string) bool {
	t.Helper()
	_, err := os.Stat(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err != nil
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// A blob no record names and an upload's temporary file, older than the
// grace period, are removed and recorded once each (orphan: true, the
// bytes' size and digest); a younger one waits for the grace period;
// recorded attachments (deleted or not) and names that are not the
// product's are never touched.
func TestOrphanBlobsRemovedAfterGrace(t *testing.T) {
	e, blobs := blobEnv(t)
	ctx := context.Background()
	e.cfg.OrphanGrace = 2 * time.Hour
	mids := e.thread("t1", 2, 1)
	kept := e.attach(blobs, "t1", mids[0], []byte("recorded"))
	deleted := e.attach(blobs, "t1", mids[1], []byte("recorded, soft-deleted"))
	if _, err := e.st.DeleteAttachment(ctx, "t1", mids[1], deleted.ID); err != nil {
		t.Fatal(err)
	}
	now := e.clock.Now()
	old, young := now.Add(-3*time.Hour), now.Add(-time.Hour)
	orphan, temp, later := e.st.NewID(), e.st.NewID(), e.st.NewID()
	orphanBody, tempBody := []byte("a blob whose record was never written"), []byte("half an upl")
	pOrphan := e.plant(store.BlobName("t1", mids[0], orphan), orphanBody, old)
	pTemp := e.plant(store.BlobName("gone", "gone-m0", temp)+".18b2f3c4d5e6f7a8.tmp", tempBody, old)
	pLater := e.plant(store.BlobName("t1", mids[1], later), []byte("young"), young)
	pForeign := e.plant("notes/readme.txt", []byte("not an attachment"), old)
	for _, a := range []store.Attachment{kept, deleted} {
		p := filepath.Join(e.dir, "blobs", filepath.FromSlash(a.BlobName()))
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}

	r := e.blobRunner(blobs)
	_, ra := e.run(r, RunRequest{})
	if !gone(t, pOrphan) || !gone(t, pTemp) || gone(t, pLater) || gone(t, pForeign) ||
		!e.blobExists(blobs, kept) || !e.blobExists(blobs, deleted) {
		t.Fatalf("after the sweep: orphan gone %v, temp gone %v, young gone %v, foreign gone %v, recorded %v %v",
			gone(t, pOrphan), gone(t, pTemp), gone(t, pLater), gone(t, pForeign), e.blobExists(blobs, kept), e.blobExists(blobs, deleted))
	}
	for _, c := range []struct {
		id, tid, mid, blob string
		body               []byte
	}{
		{orphan, "t1", mids[0], store.BlobName("t1", mids[0], orphan), orphanBody},
		{temp, "gone", "gone-m0", store.BlobName("gone", "gone-m0", temp) + ".18b2f3c4d5e6f7a8.tmp", tempBody},
	} {
		it := ra.item(t, c.id)
		if it.ItemType != audit.ItemAttachment || it.Status != audit.StatusPurged || !it.Orphan || it.Blob != c.blob ||
			it.ThreadID != c.tid || it.MessageID != c.mid || it.Size == nil || *it.Size != int64(len(c.body)) ||
			it.SHA256 != hexSum(c.body) || it.Recovered || it.Cause != audit.CauseDeleted {
			t.Errorf("orphan record = %+v", it)
		}
	}
	ra.noItem(t, later)
	if got := testutil.ToFloat64(e.metrics.OrphansRemoved); got != 2 {
		t.Fatalf("orphans removed = %v, want 2", got)
	}
	if got := testutil.ToFloat64(e.metrics.BlobsPurged); got != 0 {
		t.Fatalf("blobs purged = %v: orphans are counted apart", got)
	}
	if owed, err := e.st.OwedBlobs(ctx); err != nil || len(owed) != 0 {
		t.Fatalf("owed after the run = %+v, %v", owed, err)
	}

	_, ra = e.run(r, RunRequest{})
	ra.noItem(t, orphan)
	ra.noItem(t, later)
	e.clock.mu.Lock()
	e.clock.now = now.Add(2 * time.Hour)
	e.clock.mu.Unlock()
	_, ra = e.run(r, RunRequest{})
	if !gone(t, pLater) || gone(t, pForeign) {
		t.Fatal("once past its grace period the young orphan should go, and only it")
	}
	ra.item(t, later)
	ra.noItem(t, orphan)
}

// A run looks at most OrphanScan objects and the next one goes on after
// the last: every orphan goes in the end, each recorded once.
func TestOrphanSweepBoundedPerRun(t *testing.T) {
	e, blobs := blobEnv(t)
	e.cfg.OrphanGrace = time.Hour
	old := e.clock.Now().Add(-2 * time.Hour)
	var paths []string
	ids := map[string]int{}
	for i := range 7 {
		id := e.st.NewID()
		ids[id] = 0
		tid := []string{"a", "a-b", "b"}[i%3]
		paths = append(paths, e.plant(store.BlobName(tid, "m", id), []byte{byte(i)}, old))
	}
	r, err := NewRunner(RunnerOptions{Store: e.st, Config: e.cfg, Logger: e.logger, Metrics: e.metrics, Clock: e.clock,
		Host: "test-host", PID: 4242, Version: "test", Blobs: blobs, OrphanScan: 3})
	if err != nil {
		t.Fatal(err)
	}
	for run := 0; run < 3; run++ {
		_, ra := e.run(r, RunRequest{})
		if n := len(ra.Items); n > 3 {
			t.Fatalf("run %d removed %d orphans, more than it may look at", run, n)
		}
		for _, it := range ra.Items {
			ids[it.ItemID]++
		}
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("orphan %s recorded %d times", id, n)
		}
	}
	for _, p := range paths {
		if !gone(t, p) {
			t.Errorf("%s left", p)
		}
	}
}

// An upload under way is never taken for an orphan, however old its
// temporary file looks: the sweep asks the blob store first, and the
// upload completes and keeps its blob.
func TestOrphanSweepSkipsUploadUnderWay(t *testing.T) {
	e, blobs := blobEnv(t)
	e.cfg.OrphanGrace = time.Hour
	mids := e.thread("t1", 1, 1)
	// The run's clock is days ahead: every file the upload writes now is
	// older than the grace period to it.
	e.clock.mu.Lock()
	e.clock.now = time.Now().Add(48 * time.Hour)
	e.clock.mu.Unlock()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	var a store.Attachment
	go func() {
		var err error
		a, err = blobs.Upload(context.Background(), e.st, attachments.Upload{Thread: "t1", Message: mids[0], Body: pr,
			MaxBytes: 1 << 20, DeclaredSize: -1})
		done <- err
	}()
	if _, err := pw.Write([]byte("first part, ")); err != nil {
		t.Fatal(err)
	}
	var temp string
	if err := blobs.Walk(context.Background(), "", func(o attachments.Object) (bool, error) {
		temp = o.Name
		return true, nil
	}); err != nil || temp == "" {
		t.Fatalf("the upload's temporary file is not there: %q, %v", temp, err)
	}
	_, ra := e.run(e.blobRunner(blobs), RunRequest{})
	if len(ra.Items) != 0 {
		t.Fatalf("the sweep recorded %+v during an upload", ra.Items)
	}
	if _, err := pw.Write([]byte("second part")); err != nil {
		t.Fatal(err)
	}
	_ = pw.Close()
	if err := <-done; err != nil {
		t.Fatalf("upload: %v (temporary file %s)", err, temp)
	}
	if !e.blobExists(blobs, a) {
		t.Fatal("the uploaded blob is missing")
	}
	_, ra = e.run(e.blobRunner(blobs), RunRequest{})
	ra.noItem(t, a.ID)
	if !e.blobExists(blobs, a) {
		t.Fatal("the sweep removed a recorded blob")
	}
}

// A sweep killed after it owed an orphan's removal leaves the debt: the
// next run removes the blob and records it once, as recovered.
func TestOrphanDebtFinishedByNextRun(t *testing.T) {
	e, blobs := blobEnv(t)
	ctx := context.Background()
	id := e.st.NewID()
	name := store.BlobName("t9", "m9", id)
	p := e.plant(name, []byte("orphan"), e.clock.Now())
	ok, err := e.st.OweOrphanBlob(ctx, store.OwedBlob{Name: name, Thread: "t9", Message: "m9", ID: id, Size: 6,
		SHA256: hexSum([]byte("orphan")), RunID: "killed-run", Cause: audit.CauseDeleted, Orphan: true})
	if err != nil || !ok {
		t.Fatalf("owe: %v %v", ok, err)
	}
	_, ra := e.run(e.blobRunner(blobs), RunRequest{})
	if !gone(t, p) {
		t.Fatal("the owed orphan is still there")
	}
	if it := ra.item(t, id); !it.Orphan || !it.Recovered || it.Blob != name {
		t.Fatalf("record = %+v", it)
	}
	_, ra = e.run(e.blobRunner(blobs), RunRequest{})
	ra.noItem(t, id)
}
