package retention

import (
	"context"
	"errors"
	"fmt"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Attachments soft-deleted on their own (spec §16), their message live,
// are purged after their thread's message period as messages are: found
// through their own deletion index (store.ScanAttachmentDeletions), held
// by a legal hold on their thread, counted against MAX_ITEMS. A purge
// deletes the record and owes the blob in one batch; the blob step
// (blobs.go) deletes the blob and writes the audit item once the store
// is synced. When exporting, the attachment is claimed first (a restore
// answers 409 from then on), and its own export record is durable before
// its record goes.

// deletedAttachmentsSource walks the attachments' deletion index: the
// entries due for the global message period, then those in the future
// (clock skew).
type deletedAttachmentsSource struct{}

var _ source = deletedAttachmentsSource{}

func (deletedAttachmentsSource) cause() string { return audit.CauseDeleted }

func (deletedAttachmentsSource) scan(ctx context.Context, rn *run) error {
	for _, rg := range rn.scanRanges(rn.r.cfg.MessagePeriod) {
		err := rn.r.st.ScanAttachmentDeletions(ctx, rg[0], rg[1], func(d store.AttachmentDeletion) error {
			rn.considerAttachment(ctx, d)
			return rn.looked()
		})
		if err != nil {
			return fmt.Errorf("scan attachment deletions: %w", err)
		}
		if rn.done() {
			return nil
		}
	}
	return nil
}

func (deletedAttachmentsSource) count(ctx context.Context, rn *run) (int64, error) {
	var n int64
	for _, rg := range rn.scanRanges(rn.r.cfg.MessagePeriod) {
		err := rn.r.st.ScanAttachmentDeletions(ctx, rg[0], rg[1], func(store.AttachmentDeletion) error { n++; return nil })
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

// considerAttachment applies the rules of spec §3 for messages to one
// deleted attachment, with its thread's message period, on its record as
// it is now.
func (rn *run) considerAttachment(ctx context.Context, d store.AttachmentDeletion) {
	if err := ctx.Err(); err != nil {
		rn.halt(err)
		return
	}
	if rn.claims.purging(d.Thread) {
		return // the thread's purge takes it
	}
	if why, bad := rn.policy.bad[d.Thread]; bad {
		rn.journal.scanned++
		rn.record(attachmentItem(d, audit.StatusSkipped, "malformed retention override: "+why))
		return
	}
	a, err := rn.r.st.GetAttachment(ctx, d.Thread, d.Message, d.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return // purged meanwhile, with its message or thread
	case errors.Is(err, store.ErrMalformed):
		rn.journal.scanned++
		rn.record(attachmentItem(d, audit.StatusSkipped, reasonMalformed+err.Error()))
		return
	case err != nil:
		rn.fail(ctx, stageScan, "read attachment", err)
		return
	}
	rn.journal.scanned++
	d.DeletedTS = a.DeletedTS
	switch {
	case !a.Deleted:
		return // restored since it was indexed
	case a.DeletedTS <= 0:
		rn.record(attachmentItem(d, audit.StatusSkipped, reasonMalformed+"no deleted_ts"))
		return
	case a.DeletedTS > rn.at.Add(clockSkew).UnixNano():
		rn.record(attachmentItem(d, audit.StatusSkipped, reasonFuture))
		return
	case unixTime(a.DeletedTS).Add(rn.policy.of(d.Thread).messagePeriod).After(rn.at):
		return // not due yet
	}
	switch hold, err := rn.threadOnHold(ctx, d.Thread); {
	case errors.Is(err, store.ErrMalformed):
		rn.record(attachmentItem(d, audit.StatusSkipped, "malformed thread record: "+err.Error()))
		return
	case err != nil:
		rn.fail(ctx, stageScan, "read thread", err)
		return
	case hold:
		rn.record(attachmentItem(d, audit.StatusSkipped, reasonLegalHold))
		return
	}
	if rn.dry {
		rn.claims.taken++
		rn.record(attachmentItem(d, audit.StatusDryRun, ""))
		return
	}
	if err := rn.checkpoint(ctx); err != nil {
		rn.halt(err)
		return
	}
	rn.purgeAttachment(ctx, d, a.PurgeRun != "" && a.PurgeRun != rn.id)
}

// purgeAttachment purges one due attachment (exporting it first when the
// run exports); one a restore, a hold or its message's purge won since
// is left alone. Its audit item comes with its blob's deletion.
func (rn *run) purgeAttachment(ctx context.Context, d store.AttachmentDeletion, recovered bool) {
	st := rn.r.st
	if err := rn.del.oweErase(ctx); err != nil {
		rn.fail(ctx, stagePurge, "", err)
		return
	}
	if rn.del.exp != nil {
		err := st.ClaimAttachment(ctx, d, rn.id)
		if errors.Is(err, store.ErrNotEligible) {
			return
		}
		if err == nil {
			err = rn.del.exportAttachmentItem(ctx, d, recovered)
		}
		if err != nil {
			it := attachmentItem(d, "", "")
			var se *stageError
			if errors.As(err, &se) {
				rn.fail(ctx, se.stage, "", err)
				return
			}
			rn.exportFailed(ctx, []queuedPurge{{item: it}}, &exportError{it, err})
			return
		}
		rn.r.metrics.ExportedItems.Inc()
	}
	err := st.PurgeAttachment(ctx, d, store.AttachmentPurge{RunID: rn.id, Cause: audit.CauseDeleted, Erase: rn.del.erase})
	switch {
	case errors.Is(err, store.ErrNotEligible):
		return
	case err != nil:
		rn.fail(ctx, stagePurge, "", err)
		return
	}
	rn.claims.taken++
}

// exportAttachmentItem writes the export record of an attachment purged
// on its own: its thread's metadata for context, no message, and the
// attachment with its bytes; durable when it returns nil.
func (d *deleter) exportAttachmentItem(ctx context.Context, at store.AttachmentDeletion, recovered bool) error {
	if err := d.r.st.Sync(ctx); err != nil { // the claim, before its record
		return atStage(stageSync, fmt.Errorf("sync store: %w", err))
	}
	cr, err := d.r.st.NewContentReader()
	if err != nil {
		return err
	}
	defer cr.Close()
	rec, err := d.exp.Begin(audit.ExportHead{ItemType: audit.ItemAttachment, ItemID: at.ID, ThreadID: at.Thread,
		Cause: audit.CauseDeleted, ExportedAt: d.r.now().UTC(), Recovered: recovered})
	if err != nil {
		return err
	}
	err = cr.ThreadMeta(ctx, at.Thread, rec)
	if err == nil {
		err = cr.Attachments(ctx, at.Thread, at.Message, func(a store.Attachment) error {
			if a.ID != at.ID {
				return nil
			}
			return d.exportAttachment(ctx, rec, a)
		})
	}
	if err != nil {
		if aerr := rec.Abort(); aerr != nil {
			return fmt.Errorf("%w (and cutting the record off: %w)", err, aerr)
		}
		return err
	}
	if err := rec.Finish(); err != nil {
		return err
	}
	return d.exp.Sync()
}

// attachmentItem is the audit record of an attachment the run looked at
// but did not purge (purged ones are recorded with their blob).
func attachmentItem(d store.AttachmentDeletion, status, reason string) audit.Item {
	return audit.Item{ItemType: audit.ItemAttachment, ItemID: d.ID, ThreadID: d.Thread, MessageID: d.Message,
		DeletedAt: unixTime(d.DeletedTS), Status: status, Cause: audit.CauseDeleted, Reason: reason}
}
