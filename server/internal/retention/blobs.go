package retention

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// BlobStore is what a run needs of the attachments' blob store
// (server/pkg/attachments.Blobs): deleting a blob already gone is no
// error; reading an attachment's bytes, opened with the store's keys,
// for the export (attachments.ErrBlobMissing when its blob is gone).
type BlobStore interface {
	Delete(ctx context.Context, name string) error
	OpenRange(ctx context.Context, st *store.Store, a store.Attachment, off, n int64) (io.ReadCloser, error)
}

// deleteOwedBlobs deletes the blobs the store owes (spec §16): those of
// the attachments whose records this run's purges deleted, and those a
// killed run left owed. Each deletion is recorded as an "attachment"
// item once the blob is gone; a debt goes only once its record is
// synced, so a crash at any instant leaves it for the next run, which
// deletes again (a no-op) and records it unless the killed run's file
// already holds its record.
func (rn *run) deleteOwedBlobs(ctx context.Context) {
	r := rn.r
	if r.blobs == nil || rn.dry || rn.stop != nil {
		return
	}
	owed, err := r.st.OwedBlobs(ctx)
	if err != nil {
		rn.fail(ctx, stagePurge, "", fmt.Errorf("read owed blob deletions: %w", err))
		return
	}
	if len(owed) == 0 {
		return
	}
	// Blobs already gone: their deletion is owed regardless.
	ctx = context.WithoutCancel(ctx)
	// A blob goes only once the purge that owes it is durable: an
	// attachment's own purge is not synced on its own.
	if err := r.st.Sync(ctx); err != nil {
		rn.fail(ctx, stageSync, "", err)
		return
	}
	recorded, err := rn.blobsRecorded(owed)
	if err != nil {
		rn.fail(ctx, stageRecovery, "", err)
		return
	}
	done := make([]store.OwedBlob, 0, len(owed))
	for _, d := range owed {
		if err := rn.removeOwed(ctx, d); err != nil {
			// The debt stays: the next run deletes it.
			rn.fail(ctx, stagePurge, "", fmt.Errorf("delete the blob of attachment %s: %w", d.ID, err))
			break
		}
		if d.Orphan {
			r.metrics.OrphansRemoved.Inc()
		} else {
			r.metrics.BlobsPurged.Inc()
		}
		if !recorded[d.ID] && !rn.record(rn.blobItem(d)) {
			return
		}
		done = append(done, d)
	}
	if len(done) == 0 {
		return
	}
	if err := rn.journal.w.Sync(); err != nil {
		rn.journal.err = err
		rn.fail(ctx, stageAudit, "", &auditError{err})
		return
	}
	if err := r.st.ClearOwedBlobs(ctx, done); err != nil {
		rn.fail(ctx, stageSync, "", err)
		return
	}
	r.log.Debug("retention_blobs_deleted", "run_id", rn.id, "blobs", len(done))
}

// blobsRecorded reports which debts of killed runs already have their
// "purged" record in the sealed file of the run that owed them or after.
func (rn *run) blobsRecorded(owed []store.OwedBlob) (map[string]bool, error) {
	byRun := make(map[string]map[audit.ItemKey]bool)
	for _, d := range owed {
		if d.RunID == "" || d.RunID == rn.id {
			continue
		}
		if byRun[d.RunID] == nil {
			byRun[d.RunID] = make(map[audit.ItemKey]bool)
		}
		byRun[d.RunID][audit.ItemKey{Type: audit.ItemAttachment, ID: d.ID}] = true
	}
	out := make(map[string]bool)
	for runID, want := range byRun {
		found, err := audit.PurgedSince(rn.r.cfg.AuditPath, runID, want)
		if err != nil {
			return nil, fmt.Errorf("read the records of run %s: %w", runID, err)
		}
		for k := range found {
			out[k.ID] = true
		}
	}
	return out, nil
}

// blobItem is the audit record of a deleted blob.
func (rn *run) blobItem(d store.OwedBlob) audit.Item {
	at := rn.r.now().UTC()
	size := d.Size
	it := audit.Item{ItemType: audit.ItemAttachment, ItemID: d.ID, ThreadID: d.Thread, MessageID: d.Message,
		Status: audit.StatusPurged, Cause: d.Cause, KeysDeleted: 1, PurgedAt: &at, Size: &size, SHA256: d.SHA256,
		Shredded: d.Shredded, Replayed: d.Replayed, Recovered: d.RunID != rn.id, Orphan: d.Orphan}
	if d.Orphan {
		it.Blob = d.Name
	}
	if d.Upload != "" {
		it.Blob, it.Upload, it.Size = store.BlobName(d.Thread, d.Message, d.ID), d.Upload, nil
	}
	if d.DeletedTS > 0 {
		it.DeletedAt = time.Unix(0, d.DeletedTS).UTC()
	}
	return it
}

// uploadAborter is a blob store that can abort an orphan multipart
// upload (attachments.Blobs on S3).
type uploadAborter interface {
	AbortUpload(ctx context.Context, name, id string) error
}

// removeOwed deletes an owed blob, or aborts an owed multipart upload.
func (rn *run) removeOwed(ctx context.Context, d store.OwedBlob) error {
	if d.Upload == "" {
		return rn.r.blobs.Delete(ctx, d.Name)
	}
	a, ok := rn.r.blobs.(uploadAborter)
	if !ok {
		return fmt.Errorf("abort upload %s: the blob store cannot", d.Name)
	}
	return a.AbortUpload(ctx, store.BlobName(d.Thread, d.Message, d.ID), d.Upload)
}
