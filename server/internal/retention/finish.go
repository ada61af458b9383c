package retention

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/wire"
)

// finish flushes, erases, writes the footer, and reports the run.
func (rn *run) finish(ctx context.Context, res Result) (Result, error) {
	r := rn.r
	rn.drainExports(ctx)
	rn.flush(ctx)
	var footer audit.Footer
	if err := rn.del.closeExport(&footer); err != nil {
		if rn.stop == nil {
			r.metrics.countError(stageExport) // else counted with the failure that caused it
		}
		r.log.Error("retention_export_close_failed", "run_id", rn.id, "export_file", rn.del.exp.Path(), "err", err)
		rn.setStop(&stopCause{status: audit.RunFailed, reason: "close export file: " + err.Error(),
			err: fmt.Errorf("close export file: %w", err)})
	}
	var erased bool
	var eraseMS int64
	if rn.journal.err == nil && ctx.Err() == nil {
		// Keys destroyed by this run (or left by one before) leave the
		// key store's files before the footer is written.
		if err := rn.eraseKeyStore(ctx); err != nil {
			rn.fail(ctx, stageErase, "", err)
		}
	}
	if !rn.dry && r.cfg.Erase && rn.journal.err == nil && ctx.Err() == nil {
		// A failed erase fails the run; a shutdown skips it and the next
		// run erases everything.
		var err error
		if erased, eraseMS, err = rn.del.eraseStep(ctx, rn.id, rn.eraseProgress); err != nil {
			rn.fail(ctx, stageErase, "", err)
		}
	}
	if re, ok := rn.lease.lease.(ReplicaEraser); ok && erased {
		footer.Replicas = rn.replicasErased(ctx, re)
	}
	status, reason := audit.RunCompleted, ""
	var runErr error
	switch {
	case rn.stop != nil:
		status, reason = rn.stop.status, rn.stop.reason
		if status == audit.RunFailed {
			runErr = fmt.Errorf("retention run %s: %w", rn.id, rn.stop.err)
		}
	case rn.claims.full():
		reason = reasonMaxItems
	}
	finished := r.now().UTC()
	t := rn.journal.tally()
	footer.FinishedAt, footer.Status, footer.Reason = finished, status, reason
	footer.Scanned, footer.Eligible, footer.Purged = t.Scanned, t.Eligible, t.Purged
	footer.Failed, footer.Skipped, footer.Stamped = t.Failed, t.Skipped, t.Stamped
	footer.KeysDeleted, footer.DurationMS = t.KeysDeleted, finished.Sub(rn.at).Milliseconds()
	footer.Erased, footer.EraseMS = erased, eraseMS
	footer.KeystoreErased = rn.journal.keystoreErased(ctx)
	path, err := rn.journal.w.Close(footer)
	if err != nil {
		r.metrics.countError(stageAudit)
		r.log.Error("retention_audit_close_failed", "run_id", rn.id, "err", err)
		path = rn.journal.w.Path()
		if status != audit.RunFailed {
			status, reason = audit.RunFailed, "close audit file: "+err.Error()
		}
		if runErr == nil {
			runErr = fmt.Errorf("retention run %s: close audit file: %w", rn.id, err)
		}
	} else {
		r.advanceHead(ctx, rn.id, rn.journal.w, path, rn.dry, rn.replaying() && status == audit.RunCompleted)
	}
	rn.completeErasures(ctx, status, reason)

	res.FinishedAt = wire.At(finished)
	res.Status = status
	res.Scanned, res.Eligible, res.Purged = t.Scanned, t.Eligible, t.Purged
	res.Failed, res.Skipped, res.Stamped, res.KeysDeleted = t.Failed, t.Skipped, t.Stamped, t.KeysDeleted
	res.AuditFile = path
	if footer.Exported != nil {
		res.Exported, res.ExportFile = *footer.Exported, footer.ExportFile
	}
	res.ByCause = rn.journal.byCause
	if status != audit.RunCompleted {
		res.Error = reason
	}

	label := status
	if status == audit.RunCompleted && rn.dry {
		label = resultDryRun
	}
	r.metrics.Runs.WithLabelValues(label).Inc()
	r.metrics.RunDuration.Observe(finished.Sub(rn.at).Seconds())
	r.metrics.EligibleItems.Set(float64(t.Eligible))
	// A dry run purges nothing, so it is no success for the alert that
	// watches for runs that do their job.
	if status == audit.RunCompleted && !rn.dry {
		r.metrics.LastSuccess.Set(float64(finished.UnixNano()) / 1e9)
	}
	r.last.Store(&res)

	level := slog.LevelInfo
	if status != audit.RunCompleted {
		level = slog.LevelWarn
	}
	r.log.Log(ctx, level, "retention_run_finished", "run_id", rn.id, "trigger", rn.trigger, "dry_run", rn.dry,
		"status", status, "reason", reason, "scanned", t.Scanned, "eligible", t.Eligible, "purged", t.Purged,
		"failed", t.Failed, "skipped", t.Skipped, "stamped", t.Stamped, "keys_deleted", t.KeysDeleted,
		"by_cause", causeLog(rn.journal.byCause), "batches", rn.del.batches, "batches_yielded", rn.del.pace.yielded,
		"erased", erased, "erase_ms", eraseMS,
		"duration_ms", finished.Sub(rn.at).Milliseconds(), "audit_file", path, "export_file", footer.ExportFile)
	return res, runErr
}

// causeLog renders per-cause counts as a log group: eligible and purged
// for each cause seen.
func causeLog(m map[string]CauseCounts) slog.Value {
	var attrs []slog.Attr
	for _, c := range reportedCauses {
		if cc, ok := m[c]; ok {
			attrs = append(attrs, slog.Group(c, "eligible", cc.Eligible, "purged", cc.Purged))
		}
	}
	return slog.GroupValue(attrs...)
}

// replicasErased is what the footer says of a replicated shard's
// replicas' erase (nil: nothing known, or the lease lost, which stops
// the run as at any other step).
func (rn *run) replicasErased(ctx context.Context, re ReplicaEraser) *audit.ReplicaErasures {
	erased, pending, err := re.ReplicasErased(ctx)
	if err != nil {
		rn.r.log.Warn("retention_replicas_erased_unknown", "run_id", rn.id, "err", err)
		return nil
	}
	if len(erased)+len(pending) == 0 {
		return nil
	}
	out := &audit.ReplicaErasures{Erased: append([]uint64{}, erased...), Pending: append([]uint64{}, pending...)}
	rn.r.log.Info("retention_replicas_erased", "run_id", rn.id, "erased", out.Erased, "pending", out.Pending)
	return out
}
