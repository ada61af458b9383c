package retention

import (
	"context"
	"fmt"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// recoverPending finishes what earlier runs left: a purge marker means a
// purge began and its audit record may be missing. A claim that was not
// yet confirmed is re-checked like any other before it is finished (a hold
// set since wins). Dry runs only learn which threads are affected.
func (rn *run) recoverPending(ctx context.Context) {
	r := rn.r
	markers, err := r.st.PendingPurges(ctx)
	if err != nil {
		rn.fail(ctx, stageRecovery, "list pending purges", err)
		return
	}
	rn.claims.resumed(markers)
	if rn.dry || len(markers) == 0 {
		return
	}
	r.log.Info("retention_recovery", "run_id", rn.id, "pending", len(markers))
	recorded, err := rn.recordedPurges(ctx, markers)
	if err != nil {
		rn.fail(ctx, stageRecovery, "read the audit trail", err)
		return
	}
	var done []store.PurgeMarker
	for _, m := range markers {
		if err := rn.checkpoint(ctx); err != nil {
			rn.halt(err)
			return
		}
		rn.journal.scanned++
		if recorded[audit.ItemKey{Type: string(m.Kind), ID: m.ID}] {
			// The killed run synced the record and died before clearing
			// the marker: one "purged" record per item (spec §5).
			done = append(done, m)
			continue
		}
		it := audit.Item{
			ItemType:  string(m.Kind),
			ItemID:    m.ID,
			ThreadID:  m.ThreadID,
			DeletedAt: unixTime(m.DeletedTS),
			Cause:     m.Cause, // empty (deleted) for markers written before policies
			Recovered: true,
			Replayed:  m.Replayed,
			ErasureID: m.ErasureID,
			Versions:  m.Versions,
		}
		exists, err := r.st.ItemExists(ctx, m.Kind, m.ID)
		if err != nil {
			rn.fail(ctx, stageRecovery, "check pending purge", err)
			return
		}
		if exists {
			// Exported again (when exporting), recovered: the crashed run
			// may have exported it already.
			it.Reason = fmt.Sprintf(reasonRecoveredAgain, m.RunID, rn.id)
			rn.purgeItem(ctx, m, it)
		} else {
			it.Reason = fmt.Sprintf(reasonRecoveredGone, m.RunID)
			rn.finished(ctx, m, it, 0)
		}
		if rn.stop != nil {
			return
		}
	}
	if err := r.st.ClearPurges(ctx, done); err != nil {
		rn.fail(ctx, stageRecovery, "clear purge markers", err)
		return
	}
	rn.drainExports(ctx)
	rn.flush(ctx)
}

// recordedPurges reads, from the audit trail, which items whose purge is
// finished (nothing of them left) already have their "purged" record: in
// the file of the run that claimed them (sealed at this run's start) or a
// later one.
func (rn *run) recordedPurges(ctx context.Context, markers []store.PurgeMarker) (map[audit.ItemKey]bool, error) {
	byRun := make(map[string]map[audit.ItemKey]bool)
	for _, m := range markers {
		exists, err := rn.r.st.ItemExists(ctx, m.Kind, m.ID)
		if err != nil {
			return nil, err
		}
		if exists {
			continue // its deletes were not finished: it has no record
		}
		if byRun[m.RunID] == nil {
			byRun[m.RunID] = make(map[audit.ItemKey]bool)
		}
		byRun[m.RunID][audit.ItemKey{Type: string(m.Kind), ID: m.ID}] = true
	}
	out := make(map[audit.ItemKey]bool)
	for runID, want := range byRun {
		found, err := audit.PurgedSince(rn.r.cfg.AuditPath, runID, want)
		if err != nil {
			return nil, err
		}
		for k := range found {
			out[k] = true
		}
	}
	return out, nil
}

// recoverStamps writes the audit records of stamps that an earlier run
// made but did not record durably (it stopped in between).
func (rn *run) recoverStamps(ctx context.Context) {
	if rn.dry {
		return
	}
	markers, err := rn.r.st.PendingStamps(ctx)
	if err != nil {
		rn.fail(ctx, stageRecovery, "list pending stamps", err)
		return
	}
	for _, m := range markers {
		rn.journal.add(finishedPurge{stamp: &m, item: audit.Item{
			ItemType:  string(m.Kind),
			ItemID:    m.ID,
			ThreadID:  m.ThreadID,
			DeletedAt: unixTime(m.DeletedTS),
			Status:    audit.StatusStamped,
			Reason:    fmt.Sprintf(reasonRecoveredStamp, m.RunID),
			Recovered: true,
		}}, 0)
	}
	rn.flush(ctx)
}
