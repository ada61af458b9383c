package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Audit reasons, fixed so that operators and tests can rely on them.
const (
	reasonMalformed      = "malformed record: "
	reasonStamped        = "legacy record without deleted_ts: retention clock started"
	reasonStampDryRun    = "legacy record without deleted_ts (a real run stamps it)"
	reasonFuture         = "deleted_ts in the future (clock skew)"
	reasonLegalHold      = "legal hold"
	reasonInterrupted    = "interrupted: the next run finishes this purge"
	reasonMaxItems       = "max_items reached"
	reasonShutdown       = "shutdown: "
	reasonLeaseLost      = "lease lost: "
	reasonRecoveredGone  = "purge completed by run %s; audit record written on recovery"
	reasonRecoveredAgain = "purge begun by run %s; finished by run %s on recovery"
	reasonRecoveredStamp = "stamped by run %s; audit record written on recovery"
)

// run is one retention run, from the lease to the footer. Its parts own
// their state: the lease session (session.go), the policy snapshot
// (policy.go), the claims (claims.go), the journal (journal.go), the
// deleter (deleter.go, export.go) and the meter (progress.go). The run
// itself holds what ties them together: which sources feed it and why it
// stopped. Its steps are in files of their own: setup and the main loop
// here, the rules applied to each entry (consider.go), from a claim to its
// record (take.go), why a run stops (stop.go), and the footer
// (finish.go).
type run struct {
	r       *Runner
	id      string
	trigger string
	dry     bool
	at      time.Time // the run's reference time: cutoffs, due checks, stamps
	lease   *leaseSession
	release func() // closes the lease session and frees the run slot

	sources []source
	policy  *policySnapshot
	claims  *claims
	journal *journal
	del     *deleter
	meter   *meter

	stop *stopCause // why the run stopped before the end; the first cause wins

	// erasures are the subject erasures the run worked on (erasure.go).
	erasures map[string]*erasureRun
}

// execute performs the run begun by begin. It always releases the lease.
func (rn *run) execute(ctx context.Context) (Result, error) {
	defer rn.release()
	r := rn.r
	if r.fenced {
		// Every batch of the run, recovery's included, carries the token.
		ctx = store.WithEpoch(ctx, rn.lease.info().Epoch)
	}
	rn.at = r.now().UTC()
	rn.meter.begin(rn.at)
	rn.del = newDeleter(r, rn.checkpoint, rn.batchHook)
	rn.journal = &journal{st: r.st, keys: r.keys, log: r.log, metrics: r.metrics, flushKeys: flushKeysFactor * r.cfg.BatchSize}
	res := Result{RunID: rn.id, StartedAt: wire.At(rn.at), DryRun: rn.dry}

	// Files left .inprogress by a crashed run are sealed first, and only
	// while holding the lease, so a live run's file is never sealed.
	sealed, err := audit.SealAbandonedWith(r.cfg.AuditPath, rn.at, r.auditOpts)
	if err != nil {
		r.metrics.countError(stageAudit)
		r.log.Warn("retention_audit_seal_failed", "run_id", rn.id, "err", err)
	}
	for _, p := range sealed {
		r.log.Info("retention_audit_sealed", "run_id", rn.id, "file", p)
	}
	r.sealExports(rn.id)

	// The header records the policies in force.
	policy, overrides, err := loadPolicy(ctx, r.st, r.globalPolicy())
	if err != nil {
		return rn.failedToStart(res, stageScan, "read retention overrides", err)
	}
	rn.policy = policy
	rn.claims = newClaims(r, rn.id, rn.dry, rn.at, policy)
	if rn.replaying() {
		rn.claims.limit = 0 // a replay is whole or it did not happen
	}
	info := rn.lease.info()
	header := audit.Header{
		StartedAt:       rn.at,
		DryRun:          rn.dry,
		Period:          config.FormatDuration(r.cfg.Period),
		MessagePeriod:   config.FormatDuration(r.cfg.MessagePeriod),
		Cutoff:          rn.at.Add(-r.cfg.Period),
		Owner:           info.Owner,
		Host:            info.Host,
		PID:             info.PID,
		Epoch:           info.Epoch,
		Version:         r.version,
		BatchSize:       r.cfg.BatchSize,
		MaxAge:          formatAge(r.cfg.MaxAge),
		MaxMessages:     r.cfg.MaxMessages,
		PolicyOverrides: overrides,
		Shard:           r.shard,
	}
	if rn.trigger == TriggerErasure {
		header.Trigger = TriggerErasure
	}
	for _, src := range rn.sources {
		if n, ok := src.(headerNoter); ok {
			n.note(&header)
		}
	}
	// A run killed before it recorded its file as the head was the last to
	// begin purging: the head settles past it while that is still known,
	// before this run takes its place. Settling also gives a database from
	// before identities its identity, which the header below must name.
	if !rn.dry && !rn.replaying() {
		if _, _, _, err := r.settle(ctx); err != nil {
			r.log.Warn("retention_audit_head_unsettled", "run_id", rn.id, "err", err)
		}
	}
	// The header names the database, so that databases sharing the trail
	// tell their runs apart (head.go). A database still without an
	// identity (settling failed) gets one recorded after the header; a dry
	// run writes nothing.
	if header.DatabaseID, err = r.st.DatabaseID(ctx, false); err != nil {
		return rn.failedToStart(res, stageAudit, "read database id", err)
	}
	if l, ok, err := r.st.Lineage(ctx); err != nil {
		return rn.failedToStart(res, stageAudit, "read database lineage", err)
	} else if ok {
		header.OriginID = l.OriginID
	}
	newID := header.DatabaseID == "" && !rn.dry && !rn.replaying()
	if newID {
		header.DatabaseID = store.NewDatabaseID()
	}
	w, err := audit.CreateWith(r.cfg.AuditPath, rn.id, header, r.auditOpts)
	if err != nil {
		// Fail closed: without a durable header nothing is deleted.
		return rn.failedToStart(res, stageAudit, "create audit file", err)
	}
	rn.journal.w = w
	if !rn.dry {
		// Before any delete: this run's purges are in the database as far
		// as they go, whether or not it lives to record its file as the
		// head (settle).
		err := r.st.SetRunStarted(ctx, rn.id)
		if err == nil && newID {
			err = r.st.SetDatabaseID(ctx, header.DatabaseID)
		}
		switch {
		case errors.Is(err, store.ErrFenced):
			// A newer owner has written: the lease is lost, and nothing
			// of this run was written.
			rn.halt(err)
			return rn.finish(ctx, res)
		case err != nil:
			rn.setStop(&stopCause{status: audit.RunFailed, reason: "record run start: " + err.Error(), err: err})
			return rn.finish(ctx, res)
		}
	}
	// A replay exports nothing: the first purge exported the item, and a
	// second copy of purged content is what a restore must not make.
	if r.cfg.ExportPath != "" && !rn.dry && !rn.replaying() {
		// The file is made with the first record: a run that purges
		// nothing leaves none.
		if err := rn.del.openExport(rn.id, rn.at); err != nil {
			r.metrics.countError(stageExport)
			rn.setStop(&stopCause{status: audit.RunFailed, reason: "export: " + err.Error(), err: fmt.Errorf("export: %w", err)})
			return rn.finish(ctx, res)
		}
	}
	r.log.Info("retention_run_started", "run_id", rn.id, "trigger", rn.trigger, "dry_run", rn.dry,
		"cutoff", rn.at.Add(-r.cfg.Period), "message_cutoff", rn.at.Add(-r.cfg.MessagePeriod),
		"owner", info.Owner, "epoch", info.Epoch, "audit_file", w.Path())

	rn.recoverPending(ctx)
	rn.deleteOwedBlobs(ctx) // a killed run's
	if rn.stop == nil {
		rn.recoverStamps(ctx)
	}
	if rn.stop == nil {
		rn.countDue(ctx)
	}
	for _, src := range rn.sources {
		if rn.done() {
			break
		}
		rn.meter.cause = src.cause()
		if err := src.scan(ctx, rn); err != nil && rn.stop == nil {
			rn.fail(ctx, stageScan, "", err)
		}
	}
	rn.sweepOrphans(ctx)
	// The last report shows where the scans ended, not where the last
	// timed report left them.
	rn.reportProgress(r.now())
	return rn.finish(ctx, res)
}

// done reports whether the sources should stop: the run stopped, or it
// claimed MAX_ITEMS items.
func (rn *run) done() bool { return rn.stop != nil || rn.claims.full() }

// batchHook shows a batch boundary to the tests' hook, if any.
func (rn *run) batchHook(ctx context.Context, n int) {
	if h := rn.r.hooks.beforeBatch; h != nil {
		h(ctx, batchPoint{RunID: rn.id, Lease: rn.lease.lease, Audit: rn.journal.w, N: n})
	}
}

// failedToStart reports a run that failed before its audit header was
// written: nothing was deleted, and there is no file to close.
func (rn *run) failedToStart(res Result, stage, what string, err error) (Result, error) {
	r := rn.r
	r.metrics.countError(stage)
	r.metrics.Runs.WithLabelValues(resultFailed).Inc()
	res.FinishedAt = wire.At(r.now().UTC())
	res.Status = audit.RunFailed
	res.Error = what + ": " + err.Error()
	r.metrics.RunDuration.Observe(res.FinishedAt.Sub(res.StartedAt.Time).Seconds())
	r.last.Store(&res)
	r.log.Error("retention_run_failed", "run_id", rn.id, "trigger", rn.trigger, "stage", stage, "err", err)
	return res, fmt.Errorf("%s: %w", what, err)
}

// countDue counts, per source, the entries the scans will look at, so
// progress can say how much is left of each cause. A failure only leaves
// the count unknown.
func (rn *run) countDue(ctx context.Context) {
	var n int64
	by := make(map[string]int64)
	for _, src := range rn.sources {
		c, err := src.count(ctx, rn)
		if err != nil {
			rn.r.log.Warn("retention_count_due_failed", "run_id", rn.id, "cause", src.cause(), "err", err)
			rn.meter.counted(-1, nil)
			return
		}
		n += c
		if c > 0 {
			by[src.cause()] += c
		}
	}
	rn.meter.counted(n, by)
	rn.r.log.Info("retention_run_due", "run_id", rn.id, "due", n, "due_by_cause", countLog(by))
	rn.reportProgress(rn.r.now())
}
