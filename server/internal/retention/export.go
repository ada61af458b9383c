package retention

import (
	"context"
	"fmt"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// With PROGRESSDB_RETENTION_EXPORT_PATH set, an item whose purge has begun
// is not deleted at once: it waits in the run's export queue. A group of
// them is exported in this order, which keeps spec §3.3 true through a
// kill at any instant:
//
//  1. store sync: the purge markers are durable before any of their
//     export records can reach the file, so a record found after a crash
//     always has a marker, and the next run's re-export says "recovered";
//  2. one record per item, streamed from one snapshot of the store taken
//     after that sync (bounded memory);
//  3. export file sync: no delete happens before its record is durable;
//  4. the deletes, then the audit records as without export.
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

// purgeItem deletes an item whose purge has begun (its marker is written),
// or, when exporting, queues it for the next export group.
func (rn *run) purgeItem(ctx context.Context, m store.PurgeMarker, it audit.Item) {
	if rn.exp != nil {
		rn.queue = append(rn.queue, queuedPurge{marker: m, item: it})
		if len(rn.queue) >= exportGroup {
			rn.drainExports(ctx)
		}
		return
	}
	keys, err := rn.purge(ctx, m)
	if err != nil {
		rn.purgeFailed(it, keys, err)
		return
	}
	rn.finished(ctx, m, it, keys)
}

// drainExports exports the queued items, then purges them once their
// records are durable. Items not purged keep their markers: the next run
// exports them again ("recovered") and purges them.
func (rn *run) drainExports(ctx context.Context) {
	q := rn.queue
	rn.queue = nil
	if len(q) == 0 || rn.auditErr != nil || rn.stop != nil && rn.stop.status != audit.RunCompleted {
		return
	}
	if err := rn.checkpoint(ctx); err != nil {
		rn.halt(err)
		return
	}
	if err := rn.r.st.Sync(ctx); err != nil {
		rn.fail(ctx, stageSync, "sync store", err)
		return
	}
	// A failed export drops the group's records with it (they share one
	// gzip member): none of the group is deleted.
	cr, err := rn.r.st.NewContentReader() // after the sync: the markers hold the items still
	if err != nil {
		rn.exportFailed(ctx, q[0].item, err)
		return
	}
	for i, p := range q {
		if err := rn.export(ctx, cr, p); err != nil {
			_ = cr.Close()
			rn.exportFailed(ctx, p.item, err)
			if rn.stop.status == audit.RunFailed { // not a shutdown: say why they stay
				for _, o := range q[:i] {
					rn.notExported(o.item, err)
				}
			}
			return
		}
	}
	_ = cr.Close() // a read-only snapshot: nothing to lose
	if err := rn.exp.Sync(); err != nil {
		rn.exportFailed(ctx, q[0].item, err)
		if rn.stop.status == audit.RunFailed {
			for _, p := range q[1:] {
				rn.notExported(p.item, err)
			}
		}
		return
	}
	rn.r.metrics.ExportedItems.Add(float64(len(q)))
	for _, p := range q {
		keys, err := rn.purge(ctx, p.marker)
		if err != nil {
			rn.purgeFailed(p.item, keys, err)
			return
		}
		rn.finished(ctx, p.marker, p.item, keys)
		if rn.stop != nil && rn.stop.status != audit.RunCompleted {
			return
		}
	}
}

// export writes one item's record; it is durable at the next exp.Sync.
func (rn *run) export(ctx context.Context, cr *store.ContentReader, p queuedPurge) error {
	m := p.marker
	rec, err := rn.exp.Begin(audit.ExportHead{
		ItemType:   string(m.Kind),
		ItemID:     m.ID,
		ThreadID:   m.ThreadID,
		Cause:      exportCause(p.item),
		ExportedAt: rn.r.now().UTC(),
		Recovered:  p.item.Recovered,
	})
	if err != nil {
		return err
	}
	if m.Kind == store.KindThread {
		err = cr.Thread(ctx, m.ID, rec)
	} else {
		err = cr.Message(ctx, m.ThreadID, m.ID, rec)
	}
	if err == nil {
		return rec.Finish()
	}
	if aerr := rec.Abort(); aerr != nil {
		return fmt.Errorf("%w (and cutting the record off: %w)", err, aerr)
	}
	return err
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

// exportFailed stops the run without deleting the item: a shutdown or a
// lost lease interrupts it, anything else fails it (fail closed).
func (rn *run) exportFailed(ctx context.Context, it audit.Item, err error) {
	if rn.stop != nil && rn.stop.status == audit.RunCompleted {
		rn.stop = nil // a run stopped at MAX_ITEMS whose export failed has failed
	}
	if isStop(err) || ctx.Err() != nil {
		rn.halt(err)
		return
	}
	rn.r.metrics.countError(stageExport)
	rn.r.log.Error("retention_export_failed", "run_id", rn.id, "item_type", it.ItemType, "item_id", it.ItemID,
		"export_file", rn.exp.Path(), "err", err)
	rn.notExported(it, err)
	rn.setStop(&stopCause{status: audit.RunFailed, reason: "export " + it.ItemType + " " + it.ItemID + ": " + err.Error(),
		err: fmt.Errorf("export %s %s: %w", it.ItemType, it.ItemID, err)})
}

// notExported records an item left undeleted by an export failure (its
// own or its group's). Its marker stays: the next run exports and purges it.
func (rn *run) notExported(it audit.Item, err error) {
	it.Status = audit.StatusFailed
	it.Reason = reasonExportFailed + err.Error()
	rn.record(it)
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

// closeExport seals this run's export file and fills in the footer's
// export fields; an error leaves the file in progress for the next start.
func (rn *run) closeExport(f *audit.Footer) error {
	if rn.exp == nil {
		return nil
	}
	sum, err := rn.exp.Close()
	if err != nil {
		if rn.stop == nil || rn.stop.status != audit.RunFailed {
			rn.r.metrics.countError(stageExport) // else counted with the failure that caused it
		}
		rn.r.log.Error("retention_export_close_failed", "run_id", rn.id, "export_file", rn.exp.Path(), "err", err)
		return err
	}
	n := sum.Records
	f.Exported = &n
	f.ExportFile = sum.Path
	f.ExportSHA256 = sum.SHA256
	return nil
}
