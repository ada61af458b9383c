package retention

import (
	"context"
	"fmt"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// take claims an eligible item and purges it (or records it in a dry
// run), whatever source found it.
func (rn *run) take(ctx context.Context, c candidate) {
	if rn.dry {
		rn.claims.take(ctx, c)
		rn.record(c.item(audit.StatusDryRun, ""))
		return
	}
	if err := rn.checkpoint(ctx); err != nil {
		rn.halt(err)
		return
	}
	m, taken, why, err := rn.claims.take(ctx, c)
	switch {
	case err != nil:
		rn.fail(ctx, stagePurge, "", err)
	case why != "":
		rn.givenBack(c.item(audit.StatusSkipped, why))
	case taken:
		rn.purgeItem(ctx, m, c.item("", ""))
	}
}

// purgeItem deletes a claimed item, or, when exporting, queues it for the
// next export group (export.go).
func (rn *run) purgeItem(ctx context.Context, m store.PurgeMarker, it audit.Item) {
	// What a subject erasure purges is never exported: a copy of it is
	// what the erasure must not leave.
	if rn.del.exp != nil && it.Cause != audit.CauseSubject {
		rn.queueExport(ctx, m, it)
		return
	}
	if m, ok := rn.confirm(ctx, m, it); ok {
		rn.deleteItem(ctx, m, it)
	}
}

// confirm re-checks a claim before anything irreversible (claims.confirm);
// a claim given back is recorded as skipped, with the reason.
func (rn *run) confirm(ctx context.Context, m store.PurgeMarker, it audit.Item) (store.PurgeMarker, bool) {
	if h := rn.r.hooks.beforeConfirm; h != nil {
		h(ctx, m)
	}
	confirmed, why, err := rn.claims.confirm(ctx, m)
	switch {
	case err != nil:
		rn.fail(ctx, stagePurge, "", err)
		return m, false
	case why != "":
		it.Status, it.Reason = audit.StatusSkipped, why
		rn.givenBack(it)
		return m, false
	}
	return confirmed, true
}

// givenBack records a claim a hold or an override won.
func (rn *run) givenBack(it audit.Item) {
	rn.r.log.Info("retention_claim_given_back", "run_id", rn.id, "item_type", it.ItemType, "item_id", it.ItemID,
		"reason", it.Reason)
	rn.record(it)
}

// deleteItem deletes a confirmed item's keys and queues its record.
func (rn *run) deleteItem(ctx context.Context, m store.PurgeMarker, it audit.Item) {
	keys, err := rn.del.purge(ctx, &m)
	if err != nil {
		rn.purgeFailed(it, keys, err)
		return
	}
	rn.finished(ctx, m, it, keys)
}

// checkpoint is the check before any write: not shut down, lease still
// ours, not paused (dry runs delete nothing and go on while paused).
func (rn *run) checkpoint(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := rn.lease.check(); err != nil {
		return err
	}
	if !rn.dry && !rn.replaying() {
		if paused, err := rn.r.pausedAtBatch(ctx); paused {
			if err != nil {
				return fmt.Errorf("%w: %w", ErrPaused, err)
			}
			return ErrPaused
		}
	}
	return nil
}

// purgeFailed records an item whose purge stopped part way. Its marker
// stays, so the next run finishes the purge.
func (rn *run) purgeFailed(it audit.Item, keys int, err error) {
	it.Status = audit.StatusFailed
	it.KeysDeleted = int64(keys)
	if isStop(err) {
		it.Reason = reasonInterrupted
		rn.record(it)
		rn.halt(err)
		return
	}
	it.Reason = "purge failed: " + err.Error()
	rn.r.metrics.countError(stagePurge)
	rn.r.log.Error("retention_item_failed", "run_id", rn.id, "item_type", it.ItemType, "item_id", it.ItemID, "err", err)
	rn.record(it)
	rn.setStop(&stopCause{status: audit.RunFailed, reason: "purge " + it.ItemType + " " + it.ItemID + ": " + err.Error(), err: err})
}

// finished queues a purged item for the next durable group write.
func (rn *run) finished(ctx context.Context, m store.PurgeMarker, it audit.Item, keys int) {
	at := rn.r.now().UTC()
	it.Status = audit.StatusPurged
	it.KeysDeleted = int64(keys)
	it.PurgedAt = &at
	it.Shredded = m.Shredded
	if rn.journal.add(finishedPurge{marker: m, item: it}, keys) {
		rn.flush(ctx)
	}
}

// flush makes the journal's group durable (journal.flush).
func (rn *run) flush(ctx context.Context) {
	if err := rn.journal.flush(ctx); err != nil {
		rn.fail(ctx, stageSync, "", err)
		return
	}
	// The purges just recorded may owe their attachments' blobs.
	rn.deleteOwedBlobs(ctx)
}

// record appends an item record; after an audit write error nothing more
// is written or deleted.
func (rn *run) record(it audit.Item) bool {
	if err := rn.journal.record(it); err != nil {
		rn.fail(context.Background(), stageAudit, "", err)
		return false
	}
	return true
}
