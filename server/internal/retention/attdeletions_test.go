package retention

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/store"
)

func (e *env) deleteAttachment(a store.Attachment) {
	e.t.Helper()
	if _, err := e.st.DeleteAttachment(context.Background(), a.Thread, a.Message, a.ID); err != nil {
		e.t.Fatalf("delete attachment %s: %v", a.ID, err)
	}
}

func (e *env) attachmentGone(a store.Attachment) bool {
	e.t.Helper()
	_, err := e.st.GetAttachment(context.Background(), a.Thread, a.Message, a.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		e.t.Fatal(err)
	}
	return err != nil
}

// gone reports whether an attachment's record and blob are both gone,
// failing when only one is.
func (e *env) gone(blobs *attachments.Blobs, a store.Attachment) bool {
	e.t.Helper()
	rec, blob := e.attachmentGone(a), !e.blobExists(blobs, a)
	if rec != blob {
		e.t.Fatalf("attachment %s: record gone %t, blob gone %t", a.ID, rec, blob)
	}
	return rec
}

// An attachment deleted on its own (its message live) is purged after the
// message period: record, index entry and blob, recorded once; one not
// due, restored, or of another live message stays. A dry run previews it
// and MAX_ITEMS counts it.
func TestDeletedAttachmentPurged(t *testing.T) {
	ctx := context.Background()
	e, blobs := blobEnv(t)
	mids := e.thread("t1", 2, 1)
	due := e.attach(blobs, "t1", mids[0], []byte("due"))
	due2 := e.attach(blobs, "t1", mids[1], []byte("due too"))
	kept := e.attach(blobs, "t1", mids[0], []byte("kept"))
	restored := e.attach(blobs, "t1", mids[1], []byte("restored"))
	e.deleteAttachment(due)
	e.deleteAttachment(due2)
	e.deleteAttachment(restored)
	if _, err := e.st.RestoreAttachment(ctx, "t1", mids[1], restored.ID); err != nil {
		t.Fatal(err)
	}
	e.at(20 * day)
	late := e.attach(blobs, "t1", mids[0], []byte("late"))
	e.deleteAttachment(late)
	e.at(31 * day)

	r := e.blobRunner(blobs)
	_, ra := e.run(r, RunRequest{DryRun: true})
	if it := ra.item(t, due.ID); it.Status != audit.StatusDryRun || it.ItemType != audit.ItemAttachment {
		t.Fatalf("dry run record = %+v", it)
	}
	if e.gone(blobs, due) {
		t.Fatal("a dry run purged an attachment")
	}

	e.cfg.MaxItems = 1
	res, ra := e.run(e.blobRunner(blobs), RunRequest{})
	first, second := due, due2
	if e.gone(blobs, due2) {
		first, second = due2, due
	}
	if !e.gone(blobs, first) || e.gone(blobs, second) || res.Purged != 1 {
		t.Fatalf("MAX_ITEMS 1: %+v", res)
	}
	it := ra.item(t, first.ID)
	if it.ItemType != audit.ItemAttachment || it.Status != audit.StatusPurged || it.Cause != audit.CauseDeleted ||
		it.MessageID != first.Message || it.Size == nil || *it.Size != first.Size || it.SHA256 != first.SHA256 || it.DeletedAt.IsZero() {
		t.Fatalf("record = %+v", it)
	}

	e.cfg.MaxItems = 0
	_, ra = e.run(e.blobRunner(blobs), RunRequest{})
	ra.item(t, second.ID)
	if !e.gone(blobs, second) || e.gone(blobs, kept) || e.gone(blobs, restored) || e.gone(blobs, late) {
		t.Fatal("the second run purged the wrong attachments")
	}
	if _, err := e.st.GetMessage(ctx, "t1", mids[0]); err != nil {
		t.Fatalf("the live message: %v", err)
	}
	e.at(51 * day)
	e.run(e.blobRunner(blobs), RunRequest{})
	if !e.gone(blobs, late) || e.gone(blobs, kept) {
		t.Fatal("the attachment deleted later was not purged once due")
	}
}

// A held thread loses no attachment through real runs: not one deleted on
// its own, not those of its deleted messages, not those of the thread
// when it is deleted; once the hold is lifted they go.
func TestHeldThreadKeepsAttachments(t *testing.T) {
	ctx := context.Background()
	e, blobs := blobEnv(t)
	mids := e.thread("held", 3, 1)
	own := e.attach(blobs, "held", mids[0], []byte("deleted on its own"))
	ofMsg := e.attach(blobs, "held", mids[1], []byte("of a deleted message"))
	live := e.attach(blobs, "held", mids[2], []byte("live"))
	if _, err := e.st.SetLegalHold(ctx, "held", true); err != nil {
		t.Fatal(err)
	}
	e.deleteAttachment(own)
	e.deleteMessage("held", mids[1])
	e.at(31 * day)
	_, ra := e.run(e.blobRunner(blobs), RunRequest{})
	if it := ra.item(t, own.ID); it.Status != audit.StatusSkipped || it.Reason != reasonLegalHold {
		t.Fatalf("held attachment record = %+v", it)
	}
	e.deleteThread("held")
	e.at(62 * day)
	e.run(e.blobRunner(blobs), RunRequest{})
	for _, a := range []store.Attachment{own, ofMsg, live} {
		if e.gone(blobs, a) {
			t.Fatalf("held attachment %s purged", a.ID)
		}
	}

	if _, err := e.st.SetLegalHold(ctx, "held", false); err != nil {
		t.Fatal(err)
	}
	e.run(e.blobRunner(blobs), RunRequest{})
	for _, a := range []store.Attachment{own, ofMsg, live} {
		if !e.gone(blobs, a) {
			t.Fatalf("attachment %s left after the hold was lifted", a.ID)
		}
	}
}

// Exporting, an attachment purged on its own has a record of its own in
// the archive, bytes included, before its record and blob go; a restore
// of a claimed one is refused.
func TestDeletedAttachmentExported(t *testing.T) {
	e, blobs := blobEnv(t)
	e.exportOn()
	mids := e.thread("t1", 1, 1)
	body := randomBytes(100<<10, 3)
	a := e.attach(blobs, "t1", mids[0], body)
	e.deleteAttachment(a)
	e.at(31 * day)
	res, ra := e.run(e.blobRunner(blobs), RunRequest{})
	if res.Exported != 1 || !e.gone(blobs, a) {
		t.Fatalf("run: %+v", res)
	}
	ra.item(t, a.ID)
	recs := exportRecords(t, res.ExportFile)
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	rec := recs[0]
	if rec.ItemType != audit.ItemAttachment || rec.ItemID != a.ID || rec.ThreadID != "t1" || rec.Recovered ||
		len(rec.Messages) != 0 || len(rec.Thread) == 0 || len(rec.Attachments) != 1 || !bytes.Equal(rec.Attachments[0].Data, body) ||
		!rec.Attachments[0].Deleted {
		t.Fatalf("export record %+v with %d attachments", rec.ExportHead, len(rec.Attachments))
	}
}

// A restore's replay repeats the purge of an attachment purged on its
// own after the backup, though the backup holds it live: its record and
// its restored blob go, recorded replayed; the other attachment stays.
func TestReplayPurgesAttachmentDeletedAlone(t *testing.T) {
	ctx := context.Background()
	e, blobs := blobEnv(t)
	e.run(e.blobRunner(blobs), RunRequest{Trigger: TriggerCLI}) // the backup's head
	mids := e.thread("t1", 1, 1)
	body := []byte("restored bytes")
	a := e.attach(blobs, "t1", mids[0], body)
	kept := e.attach(blobs, "t1", mids[0], []byte("kept"))
	backupDir := e.copyDB("backup")
	e.deleteAttachment(a)
	e.at(31 * day)
	_, ra := e.run(e.blobRunner(blobs), RunRequest{Trigger: TriggerCLI})
	ra.item(t, a.ID)
	// The blob store comes back from the backup too (a file:// folder).
	if err := os.WriteFile(filepath.Join(e.dir, "blobs", filepath.FromSlash(a.BlobName())), body, 0o640); err != nil {
		t.Fatal(err)
	}

	st, _ := e.restored(backupDir)
	r, err := NewRunner(RunnerOptions{Store: st, Config: e.cfg, Logger: e.logger, Clock: e.clock, Host: "test-host",
		PID: 4243, Version: "test", Blobs: blobs})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.GetAttachment(ctx, "t1", mids[0], a.ID); err != nil || got.Deleted {
		t.Fatalf("the backup's copy: %+v, %v", got, err)
	}
	rep, err := r.Run(ctx, RunRequest{Trigger: audit.TriggerRestore, Replay: ReplayOptions{BackupID: "b1"}})
	if err != nil || rep.Status != audit.RunCompleted {
		t.Fatalf("replay: %v %+v", err, rep)
	}
	if _, err := st.GetAttachment(ctx, "t1", mids[0], a.ID); !errors.Is(err, store.ErrNotFound) || e.blobExists(blobs, a) {
		t.Fatalf("after the replay: record %v, blob there %t", err, e.blobExists(blobs, a))
	}
	if it := e.audit(rep).item(t, a.ID); it.ItemType != audit.ItemAttachment || !it.Replayed || it.Status != audit.StatusPurged {
		t.Fatalf("replayed attachment record = %+v", it)
	}
	if _, err := st.GetAttachment(ctx, "t1", mids[0], kept.ID); err != nil || !e.blobExists(blobs, kept) {
		t.Fatalf("the other attachment: %v", err)
	}
}
