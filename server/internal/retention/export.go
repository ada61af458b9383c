package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// With PROGRESSDB_RETENTION_EXPORT_PATH set, an item whose purge has begun
// is not deleted at once: it waits in the run's export queue. A group of
// them is exported in this order, which keeps spec §3.3 true through a
// kill at any instant:
//
//  1. every claim re-checked (claims.confirm): one that a hold or an
//     override now wins is given back, neither exported nor deleted;
//  2. store sync: the purge markers are durable before any of their
//     export records can reach the file, so a record found after a crash
//     always has a marker, and the next run's re-export says "recovered";
//  3. one record per item, streamed from one snapshot of the store taken
//     after that sync (bounded memory);
//  4. export file sync: no delete happens before its record is durable;
//  5. the deletes, then the audit records as without export.
//
// Grouping shares the two syncs among up to exportGroup items; on their own
// they would cost more than purging a small item.
const exportGroup = 64

// queuedPurge is an item whose purge has begun and whose export is due.
type queuedPurge struct {
	marker store.PurgeMarker
	item   audit.Item
}

// reasonExportFailed prefixes the audit reason of an item not deleted
// because its export failed.
const reasonExportFailed = "not deleted: export failed: "

// exportError is an export failure and the item it failed on.
type exportError struct {
	item audit.Item
	err  error
}

func (e *exportError) Error() string {
	return "export " + e.item.ItemType + " " + e.item.ItemID + ": " + e.err.Error()
}
func (e *exportError) Unwrap() error { return e.err }

// openExport prepares the run's export file; the folder is checked again
// here, and when the file is made, since it may have been replaced since
// the server started (a link into the database folder, a file).
func (d *deleter) openExport(runID string, at time.Time) error {
	cfg := d.r.cfg
	exp, err := audit.NewExportWriter(cfg.ExportPath, runID, at, d.r.st.Path(), cfg.AuditPath)
	if err != nil {
		return err
	}
	d.exp = exp
	return nil
}

// exportGroup writes the export records of a group of confirmed claims and
// makes them durable.
func (d *deleter) exportGroup(ctx context.Context, q []queuedPurge) error {
	if err := d.r.st.Sync(ctx); err != nil {
		return atStage(stageSync, fmt.Errorf("sync store: %w", err))
	}
	cr, err := d.r.st.NewContentReader() // after the sync: the markers hold the items still
	if err != nil {
		return &exportError{q[0].item, err}
	}
	defer cr.Close() // a read-only snapshot: nothing to lose
	for _, p := range q {
		if err := d.export(ctx, cr, p); err != nil {
			return &exportError{p.item, err}
		}
	}
	if err := d.exp.Sync(); err != nil {
		return &exportError{q[0].item, err}
	}
	return nil
}

// export writes one item's record; it is durable at the next exp.Sync.
func (d *deleter) export(ctx context.Context, cr *store.ContentReader, p queuedPurge) error {
	m := p.marker
	rec, err := d.exp.Begin(audit.ExportHead{
		ItemType:   string(m.Kind),
		ItemID:     m.ID,
		ThreadID:   m.ThreadID,
		Cause:      exportCause(p.item),
		ExportedAt: d.r.now().UTC(),
		Recovered:  p.item.Recovered,
	})
	if err != nil {
		return err
	}
	mid := ""
	if m.Kind == store.KindThread {
		err = cr.Thread(ctx, m.ID, rec)
	} else {
		mid = m.ID
		err = cr.Message(ctx, m.ThreadID, m.ID, rec)
	}
	if err == nil {
		err = cr.Attachments(ctx, m.ThreadID, mid, func(a store.Attachment) error {
			return d.exportAttachment(ctx, rec, a)
		})
	}
	if err == nil {
		return rec.Finish()
	}
	if aerr := rec.Abort(); aerr != nil {
		return fmt.Errorf("%w (and cutting the record off: %w)", err, aerr)
	}
	return err
}

// errNoBlobStore: an attachment is to be exported and the runner has no
// blob store to read it from; the item is not deleted (fail closed).
var errNoBlobStore = errors.New("attachments store not open: an attachment's bytes cannot be exported")

// exportAttachment writes attachment a, with its bytes streamed from the
// blob store, into the item's record: opened when the store seals, as
// sealed bodies are. Its bytes are left out (null) when no key opens
// them any more, or when its blob is already gone (nothing to keep).
func (d *deleter) exportAttachment(ctx context.Context, rec *audit.ExportItem, a store.Attachment) error {
	meta := exportMeta(a)
	if a.Unreadable {
		meta.Key, meta.Sealed = a.Key, a.Sealed // as stored
		return rec.Attachment(meta, nil)
	}
	if d.r.blobs == nil {
		return errNoBlobStore
	}
	body, err := d.r.blobs.OpenRange(ctx, d.r.st, a, 0, a.Size)
	switch {
	case errors.Is(err, attachments.ErrBlobMissing):
		return rec.Attachment(meta, nil)
	case errors.Is(err, store.ErrUnreadable):
		meta.SHA256, meta.ContentType, meta.Filename, meta.Key, meta.Sealed = "", "", "", a.Key, a.Sealed
		return rec.Attachment(meta, nil)
	case err != nil:
		return fmt.Errorf("open the blob of attachment %s: %w", a.ID, err)
	}
	defer body.Close()
	return rec.Attachment(meta, body)
}

// exportMeta is the export file's copy of a's metadata, in the plain
// shape (Key and Sealed empty): the export opened what it could. Every
// field of store.Attachment but the store's own bookkeeping (PurgeRun,
// Unreadable) is copied; TestExportMetaCopiesEveryField keeps it so.
func exportMeta(a store.Attachment) audit.AttachmentMeta {
	return audit.AttachmentMeta{ID: a.ID, Thread: a.Thread, Message: a.Message, Size: a.Size, SHA256: a.SHA256,
		ContentType: a.ContentType, Filename: a.Filename, CreatedTS: a.CreatedTS, Deleted: a.Deleted, DeletedTS: a.DeletedTS}
}

// exportCause is the cause an export record gives for the purge: the
// audit item's (records written before causes existed say nothing, and
// mean deleted).
func exportCause(it audit.Item) string {
	if it.Cause == "" {
		return audit.CauseDeleted
	}
	return it.Cause
}

// closeExport seals this run's export file and fills in the footer's
// export fields; an error leaves the file in progress for the next start.
func (d *deleter) closeExport(f *audit.Footer) error {
	if d.exp == nil {
		return nil
	}
	sum, err := d.exp.Close()
	if err != nil {
		return err
	}
	n := sum.Records
	f.Exported = &n
	f.ExportFile = sum.Path
	f.ExportSHA256 = sum.SHA256
	return nil
}

// queueExport queues a claimed item for the next export group.
func (rn *run) queueExport(ctx context.Context, m store.PurgeMarker, it audit.Item) {
	rn.del.queue = append(rn.del.queue, queuedPurge{marker: m, item: it})
	if len(rn.del.queue) >= exportGroup {
		rn.drainExports(ctx)
	}
}

// drainExports confirms the queued claims, exports them, then purges them
// once their records are durable. Items not purged keep their markers:
// the next run exports them again ("recovered") and purges them.
func (rn *run) drainExports(ctx context.Context) {
	q := rn.del.queue
	rn.del.queue = nil
	if len(q) == 0 || rn.stop != nil {
		return
	}
	if err := rn.checkpoint(ctx); err != nil {
		rn.halt(err)
		return
	}
	kept := q[:0]
	for _, p := range q {
		m, ok := rn.confirm(ctx, p.marker, p.item)
		if rn.stop != nil {
			return
		}
		if ok {
			p.marker = m
			kept = append(kept, p)
		}
	}
	if len(kept) == 0 {
		return
	}
	if err := rn.del.exportGroup(ctx, kept); err != nil {
		rn.exportFailed(ctx, kept, err)
		return
	}
	rn.r.metrics.ExportedItems.Add(float64(len(kept)))
	for _, p := range kept {
		rn.deleteItem(ctx, p.marker, p.item)
		if rn.stop != nil {
			return
		}
	}
}

// exportFailed stops the run without deleting the group: a shutdown or a
// lost lease interrupts it, anything else fails it (fail closed), and then
// every item of the group is recorded failed: its marker stays, and the
// next run exports and purges it.
func (rn *run) exportFailed(ctx context.Context, q []queuedPurge, err error) {
	var ee *exportError
	if !errors.As(err, &ee) || isStop(err) || ctx.Err() != nil {
		rn.fail(ctx, stageExport, "", err)
		return
	}
	rn.r.metrics.countError(stageExport)
	rn.r.log.Error("retention_export_failed", "run_id", rn.id, "item_type", ee.item.ItemType, "item_id", ee.item.ItemID,
		"export_file", rn.del.exp.Path(), "group", len(q), "err", ee.err)
	for _, p := range q {
		it := p.item
		it.Status = audit.StatusFailed
		it.Reason = reasonExportFailed + ee.err.Error()
		if !rn.record(it) {
			break
		}
	}
	rn.setStop(&stopCause{status: audit.RunFailed, reason: ee.Error(), err: ee})
}

// sealExports seals export files left in progress by crashed runs; the
// caller holds the lease.
func (r *Runner) sealExports(runID string) {
	if r.cfg.ExportPath == "" {
		return
	}
	sealed, err := audit.SealAbandonedExports(r.cfg.ExportPath)
	if err != nil {
		r.metrics.countError(stageExport)
		r.log.Warn("retention_export_seal_failed", "run_id", runID, "err", err)
	}
	for _, p := range sealed {
		r.log.Info("retention_export_sealed", "run_id", runID, "file", p)
	}
}
