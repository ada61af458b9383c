package retention

import (
	"context"
	"errors"
	"fmt"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// RecordRaises writes each raise of the database's format that the store
// still owes the audit trail (store.OwedRaises) as a record of its own
// (trigger "format": no items, format_from and format_to, a footer naming
// the feature), then forgets it. The server calls it at every start and
// the workflows that seal call it when they end, so a raise reaches the
// trail even when the process died right after making it.
//
// Exactly one record per raise: the record is written before the owed key
// is deleted, and a raise whose record the trail already holds (same
// database, same format raised to: a database is raised to a format once)
// is not written again, so a crash between the two steps costs only the
// deletion. It works under the lease, like a run; when the lease is held
// elsewhere the raises wait for the next call.
func (r *Runner) RecordRaises(ctx context.Context) error {
	owed, err := r.st.OwedRaises(ctx)
	if err != nil || len(owed) == 0 {
		return err
	}
	select {
	case r.slot <- struct{}{}:
	default:
		return nil // a run is going here; the next call records them
	}
	defer func() { <-r.slot }()
	lease, err := r.coord.Acquire(ctx)
	if errors.Is(err, ErrLeaseHeld) {
		r.log.Info("database_format_raise_deferred", "reason", "lease held elsewhere")
		return nil
	}
	if err != nil {
		return fmt.Errorf("acquire lease: %w", err)
	}
	defer lease.Release()
	// Settling gives a database from before identities its identity,
	// which the record names and by which it is found again.
	if _, _, _, err := r.settle(ctx); err != nil {
		r.log.Warn("retention_audit_head_unsettled", "err", err)
	}
	dbID, err := r.st.DatabaseID(ctx, true)
	if err != nil {
		return err
	}
	recorded, err := r.recordedRaises(dbID)
	if err != nil {
		return err
	}
	for _, fr := range owed {
		if !recorded[int(fr.To)] {
			if err := r.recordRaise(ctx, lease.Info(), dbID, fr); err != nil {
				return err
			}
			if r.hooks.afterRaiseRecord != nil {
				r.hooks.afterRaiseRecord(ctx, fr)
			}
		}
		if err := r.st.RaiseRecorded(ctx, fr); err != nil {
			return err
		}
	}
	return nil
}

// recordedRaises returns the formats the trail records database dbID was
// raised to. It reads every file's first and last lines: it runs only
// while a raise is owed, once per raise.
func (r *Runner) recordedRaises(dbID string) (map[int]bool, error) {
	steps, _, err := audit.Steps(r.cfg.AuditPath, audit.Head{})
	if err != nil {
		return nil, fmt.Errorf("read the audit trail: %w", err)
	}
	out := map[int]bool{}
	for _, st := range steps {
		if h := st.Header; h != nil && h.Trigger == audit.TriggerFormat && h.DatabaseID == dbID {
			out[h.FormatTo] = true
		}
	}
	return out, nil
}

// recordRaise writes one raise's record, after the trail's newest file.
func (r *Runner) recordRaise(ctx context.Context, info LeaseInfo, dbID string, fr store.FormatRaise) error {
	start := r.now().UTC()
	id := newRunID()
	h := audit.Header{StartedAt: start, Period: config.FormatDuration(r.cfg.Period),
		MessagePeriod: config.FormatDuration(r.cfg.MessagePeriod), Cutoff: start,
		Owner: info.Owner, Host: info.Host, PID: info.PID, Epoch: info.Epoch, Version: r.version,
		BatchSize: r.cfg.BatchSize, DatabaseID: dbID, Shard: r.shard,
		Trigger: audit.TriggerFormat, FormatFrom: int(fr.From), FormatTo: int(fr.To)}
	w, err := audit.CreateWith(r.cfg.AuditPath, id, h, r.auditOpts)
	if err != nil {
		return fmt.Errorf("record the format raise to %v: %w", fr.To, err)
	}
	f := w.Counts()
	f.FinishedAt = r.now().UTC()
	f.Status = audit.RunCompleted
	f.Reason = fmt.Sprintf("database format raised from %v to %v by %s at %s", fr.From, fr.To, fr.Reason, fr.At.Format("2006-01-02T15:04:05.000Z07:00"))
	path, err := w.Close(f)
	if err != nil {
		return fmt.Errorf("record the format raise to %v: %w", fr.To, err)
	}
	r.advanceHead(ctx, id, w, path, false, false)
	r.log.Info("database_format_raise_recorded", "from", int(fr.From), "to", int(fr.To), "reason", fr.Reason, "audit_file", path)
	return nil
}
