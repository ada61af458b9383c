package retention

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// blobEnv is an env with a file:// blob store its runners delete from.
func blobEnv(t *testing.T) (*env, *attachments.Blobs) {
	e := newEnv(t)
	blobs, err := attachments.Open(context.Background(), "file://"+filepath.Join(e.dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = blobs.Close() })
	return e, blobs
}

func (e *env) blobRunner(blobs BlobStore) *Runner {
	e.t.Helper()
	r, err := NewRunner(RunnerOptions{Store: e.st, Config: e.cfg, Logger: e.logger, Metrics: e.metrics, Clock: e.clock,
		Host: "test-host", PID: 4242, Version: "test", Blobs: blobs})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// attach uploads body to message mid of tid through the blob store.
func (e *env) attach(blobs *attachments.Blobs, tid, mid string, body []byte) store.Attachment {
	e.t.Helper()
	a, err := blobs.Upload(context.Background(), e.st, attachments.Upload{Thread: tid, Message: mid,
		Body: bytes.NewReader(body), ContentType: "application/pdf", Filename: "x.pdf", MaxBytes: 1 << 20, DeclaredSize: -1})
	if err != nil {
		e.t.Fatalf("upload to %s: %v", mid, err)
	}
	return a
}

func (e *env) blobExists(blobs *attachments.Blobs, a store.Attachment) bool {
	e.t.Helper()
	ok, err := blobs.Exists(context.Background(), a.BlobName())
	if err != nil {
		e.t.Fatal(err)
	}
	return ok
}

// A purge of a message or a thread deletes its attachments' blobs and
// records each with its size and digest; a legal hold keeps them.
func TestPurgeDeletesAttachmentBlobs(t *testing.T) {
	e, blobs := blobEnv(t)
	ctx := context.Background()
	mids := e.thread("t1", 2, 1)
	e.thread("held", 1, 1)
	body := bytes.Repeat([]byte("attachment bytes "), 1000)
	sum := sha256.Sum256(body)
	a1 := e.attach(blobs, "t1", mids[0], body)
	a2 := e.attach(blobs, "t1", mids[1], body[:10])
	ah := e.attach(blobs, "held", "held-m0", body)
	e.deleteMessage("t1", mids[0])
	e.deleteThread("held")
	if _, err := e.st.SetLegalHold(ctx, "held", true); err != nil {
		t.Fatal(err)
	}
	e.at(31 * day)

	r := e.blobRunner(blobs)
	res, ra := e.run(r, RunRequest{})
	if e.blobExists(blobs, a1) || !e.blobExists(blobs, a2) || !e.blobExists(blobs, ah) {
		t.Fatalf("after the message purge: a1 %v a2 %v held %v, want only a1 gone",
			e.blobExists(blobs, a1), e.blobExists(blobs, a2), e.blobExists(blobs, ah))
	}
	it := ra.item(t, a1.ID)
	if it.ItemType != audit.ItemAttachment || it.Status != audit.StatusPurged || it.ThreadID != "t1" || it.MessageID != mids[0] ||
		it.Size == nil || *it.Size != int64(len(body)) || it.SHA256 != hex.EncodeToString(sum[:]) || it.Recovered {
		t.Fatalf("attachment record = %+v", it)
	}
	ra.noItem(t, ah.ID)
	if got := testutil.ToFloat64(e.metrics.BlobsPurged); got != 1 {
		t.Fatalf("blobs purged = %v after %s", got, res.RunID)
	}
	if owed, err := e.st.OwedBlobs(ctx); err != nil || len(owed) != 0 {
		t.Fatalf("owed after the run = %+v, %v", owed, err)
	}

	e.deleteThread("t1")
	e.at(62 * day)
	_, ra = e.run(r, RunRequest{})
	if e.blobExists(blobs, a2) || !e.blobExists(blobs, ah) {
		t.Fatal("the thread purge left its attachment's blob, or the hold lost one")
	}
	if it := ra.item(t, a2.ID); it.ItemType != audit.ItemAttachment || it.Cause != audit.CauseDeleted {
		t.Fatalf("thread attachment record = %+v", it)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "blobs", "held", "held-m0", ah.ID)); err != nil {
		t.Fatalf("held blob: %v", err)
	}
}

// A run that could not delete the blobs (none given, as after a crash
// between the records' and the blobs' deletion) leaves them owed; the
// next run with the blob store deletes and records them, once.
func TestOwedBlobsFinishedByNextRun(t *testing.T) {
	e, blobs := blobEnv(t)
	mids := e.thread("t1", 1, 1)
	a := e.attach(blobs, "t1", mids[0], []byte("hello"))
	e.deleteThread("t1")
	e.at(31 * day)
	res1, ra1 := e.run(e.runner(), RunRequest{})
	ra1.noItem(t, a.ID)
	if !e.blobExists(blobs, a) || e.exists(store.KindThread, "t1") {
		t.Fatal("without a blob store the thread goes and its blob stays, owed")
	}
	_, ra2 := e.run(e.blobRunner(blobs), RunRequest{})
	if e.blobExists(blobs, a) {
		t.Fatal("the next run left the owed blob")
	}
	it := ra2.item(t, a.ID)
	if !it.Recovered || it.Size == nil || *it.Size != 5 {
		t.Fatalf("record of the owed blob = %+v (first run %s)", it, res1.RunID)
	}
	_, ra3 := e.run(e.blobRunner(blobs), RunRequest{})
	ra3.noItem(t, a.ID)
}

// A restore's replay deletes the blobs of what was purged since the
// backup: the trail's attachment records are not replayed themselves;
// the replayed thread purge owes the restored blob again.
func TestReplayDeletesRestoredBlobs(t *testing.T) {
	e, blobs := blobEnv(t)
	ctx := context.Background()
	e.run(e.blobRunner(blobs), RunRequest{Trigger: TriggerCLI}) // the backup's head
	mids := e.thread("t1", 1, 1)
	body := []byte("restored bytes")
	a := e.attach(blobs, "t1", mids[0], body)
	backupDir := e.copyDB("backup")
	e.deleteThread("t1")
	e.at(31 * day)
	_, ra := e.run(e.blobRunner(blobs), RunRequest{Trigger: TriggerCLI})
	ra.item(t, a.ID)
	// The blob store comes back from the backup too (a file:// folder).
	if err := os.MkdirAll(filepath.Join(e.dir, "blobs", "t1", mids[0]), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "blobs", filepath.FromSlash(a.BlobName())), body, 0o640); err != nil {
		t.Fatal(err)
	}

	st, _ := e.restored(backupDir)
	r, err := NewRunner(RunnerOptions{Store: st, Config: e.cfg, Logger: e.logger, Clock: e.clock, Host: "test-host",
		PID: 4243, Version: "test", Blobs: blobs})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.Run(ctx, RunRequest{Trigger: audit.TriggerRestore, Replay: ReplayOptions{BackupID: "b1"}})
	if err != nil || rep.Status != audit.RunCompleted {
		t.Fatalf("replay: %v %+v", err, rep)
	}
	if e.blobExists(blobs, a) {
		t.Fatal("the replay left the restored blob of a purged attachment")
	}
	if it := e.audit(rep).item(t, a.ID); it.ItemType != audit.ItemAttachment || !it.Replayed {
		t.Fatalf("replayed attachment record = %+v", it)
	}
}
