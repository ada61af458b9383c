package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
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
// stopped.
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

// stopCause records why a run stopped before the end.
type stopCause struct {
	status string // footer status: failed or interrupted
	reason string
	err    error // for failed runs: what Run returns
}

// stageError is a failure of one stage of a run, for the errors metric.
type stageError struct {
	stage string
	err   error
}

func (e *stageError) Error() string { return e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }

func atStage(stage string, err error) error { return &stageError{stage: stage, err: err} }

// candidate is what the run needs of a thread or message record.
type candidate struct {
	kind      store.ItemKind
	id, tid   string
	deleted   bool
	deletedTS int64
	legalHold bool
	cause     string            // audit.Cause*: why it is a candidate
	check     store.PolicyCheck // for the policy causes: what the claim re-checks
	replay    bool              // a purge the audit trail records, repeated (replay.go)
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

// consider applies the rules of spec §3 to one deletion-index entry, with
// the periods in force for its thread. The index only finds candidates:
// every decision is taken on the record as it is now.
func (rn *run) consider(ctx context.Context, e store.DeletionEntry) {
	if err := ctx.Err(); err != nil {
		rn.halt(err)
		return
	}
	if e.Kind == store.KindMessage && rn.claims.purging(e.ThreadID) {
		return // the thread's purge takes the message with it
	}
	tid := e.ThreadID
	if e.Kind == store.KindThread {
		tid = e.ID
	}
	if why, bad := rn.policy.bad[tid]; bad {
		rn.journal.scanned++
		rn.record(skippedItem(e, "malformed retention override: "+why))
		return
	}
	period := rn.policy.of(tid).period
	if e.Kind == store.KindMessage {
		period = rn.policy.of(tid).messagePeriod
	}
	c, err := rn.load(ctx, e)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return // a stale entry, or purged with its thread
	case errors.Is(err, store.ErrMalformed):
		rn.journal.scanned++
		rn.record(skippedItem(e, reasonMalformed+err.Error()))
		return
	case err != nil:
		rn.fail(ctx, stageScan, "read "+string(e.Kind), err)
		return
	}
	rn.journal.scanned++
	switch {
	case !c.deleted:
		return // restored since it was indexed
	case c.deletedTS <= 0:
		rn.stamp(ctx, e, c)
		return
	case c.deletedTS > rn.at.Add(clockSkew).UnixNano():
		rn.record(c.item(audit.StatusSkipped, reasonFuture))
		return
	case unixTime(c.deletedTS).Add(period).After(rn.at):
		return // not due yet: the index disagreed with the record
	}
	if c.kind == store.KindMessage {
		hold, err := rn.threadOnHold(ctx, c.tid)
		switch {
		case errors.Is(err, store.ErrMalformed):
			rn.record(c.item(audit.StatusSkipped, "malformed thread record: "+err.Error()))
			return
		case err != nil:
			rn.fail(ctx, stageScan, "read thread", err)
			return
		}
		c.legalHold = hold
	}
	if c.legalHold {
		rn.record(c.item(audit.StatusSkipped, reasonLegalHold))
		return
	}
	rn.take(ctx, c)
}

// load reads the record an index entry points at.
func (rn *run) load(ctx context.Context, e store.DeletionEntry) (candidate, error) {
	if e.Kind == store.KindThread {
		t, err := rn.r.st.GetThread(ctx, e.ID)
		if err != nil {
			return candidate{}, err
		}
		return candidate{kind: e.Kind, id: t.ID, tid: t.ID, deleted: t.Deleted,
			deletedTS: t.DeletedTS, legalHold: t.LegalHold, cause: audit.CauseDeleted}, nil
	}
	m, err := rn.r.st.GetMessage(ctx, e.ThreadID, e.ID)
	if err != nil {
		return candidate{}, err
	}
	return candidate{kind: e.Kind, id: m.ID, tid: e.ThreadID, deleted: m.Deleted, deletedTS: m.DeletedTS,
		cause: audit.CauseDeleted}, nil
}

// threadOnHold reports whether a message's thread is on legal hold; a
// hold covers the thread's messages too. A thread that is gone holds nothing.
func (rn *run) threadOnHold(ctx context.Context, tid string) (bool, error) {
	t, err := rn.r.st.GetThread(ctx, tid)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return t.LegalHold, err
}

// losesLive reports whether live messages of tid can be taken at all in
// this run: not when the thread is on hold, deleted, gone or unreadable.
func (rn *run) losesLive(ctx context.Context, tid string) (bool, error) {
	if rn.claims.purging(tid) {
		return false, nil
	}
	lt, err := rn.policy.liveThread(ctx, rn.r.st, tid)
	if err != nil {
		return false, err
	}
	return !lt.skip && !lt.hold, nil
}

// considerLive applies a policy to one live message: its thread must be
// live and not on hold, and the message not taken already by this run
// (an item purged for one cause is recorded once). It reports false when
// nothing of the thread can be taken for cause.
func (rn *run) considerLive(ctx context.Context, e store.AgeEntry, cause string, check store.PolicyCheck) bool {
	if err := ctx.Err(); err != nil {
		rn.halt(err)
		return false
	}
	if rn.claims.purging(e.ThreadID) || rn.claims.live[e.MessageID] {
		return true
	}
	lt, err := rn.policy.liveThread(ctx, rn.r.st, e.ThreadID)
	if err != nil {
		rn.fail(ctx, stageScan, "read thread", err)
		return false
	}
	if lt.skip || lt.hold {
		// Recorded once per thread and cause, not per message: a thread on
		// hold may hold many.
		reason := lt.reason
		if lt.hold {
			reason = reasonLegalHold
		}
		if reason != "" && !lt.held[cause] {
			if lt.held == nil {
				lt.held = make(map[string]bool)
			}
			lt.held[cause] = true
			rn.journal.scanned++
			rn.record(audit.Item{ItemType: audit.ItemThread, ItemID: e.ThreadID, ThreadID: e.ThreadID,
				Status: audit.StatusSkipped, Cause: cause, Reason: reason})
		}
		return false
	}
	rn.journal.scanned++
	rn.take(ctx, candidate{kind: store.KindMessage, id: e.MessageID, tid: e.ThreadID, cause: cause, check: check})
	return true
}

// stamp starts the retention clock of a legacy record: it is never purged
// on sight, only a full period after this run.
func (rn *run) stamp(ctx context.Context, e store.DeletionEntry, c candidate) {
	if rn.dry {
		rn.record(c.item(audit.StatusSkipped, reasonStampDryRun))
		return
	}
	if err := rn.checkpoint(ctx); err != nil {
		rn.halt(err)
		return
	}
	e.ThreadID = c.tid
	err := rn.r.st.StampDeletion(ctx, e, rn.at.UnixNano(), rn.id)
	switch {
	case errors.Is(err, store.ErrNotEligible):
		return // restored or stamped meanwhile
	case err != nil:
		rn.fail(ctx, stageStamp, "stamp deletion", err)
		return
	}
	c.deletedTS = rn.at.UnixNano()
	// Like a purge: the record joins the next durable group write, and the
	// stamp's marker stays until that write is synced.
	m := store.StampMarker{Kind: c.kind, ID: c.id, ThreadID: c.tid, DeletedTS: c.deletedTS, RunID: rn.id}
	if rn.journal.add(finishedPurge{stamp: &m, item: c.item(audit.StatusStamped, reasonStamped)}, 0) {
		rn.flush(ctx)
	}
}

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
	}
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

// fail stops the run on an error of stage: an audit write error fails it;
// a shutdown, lost lease or pause showing through the error interrupts it;
// anything else fails it. what, when set, says what failed.
func (rn *run) fail(ctx context.Context, stage, what string, err error) {
	var ae *auditError
	if errors.As(err, &ae) {
		if rn.stop == nil {
			rn.r.metrics.countError(stageAudit)
			rn.r.log.Error("retention_audit_write_failed", "run_id", rn.id, "err", ae.err)
		}
		rn.setStop(&stopCause{status: audit.RunFailed, reason: ae.Error(), err: ae})
		return
	}
	if isStop(err) || ctx.Err() != nil {
		rn.halt(err)
		return
	}
	var se *stageError
	if errors.As(err, &se) {
		stage = se.stage
	}
	rn.r.metrics.countError(stage)
	rn.r.log.Error("retention_run_error", "run_id", rn.id, "stage", stage, "err", err)
	if what != "" {
		err = fmt.Errorf("%s: %w", what, err)
	}
	rn.setStop(&stopCause{status: audit.RunFailed, reason: err.Error(), err: err})
}

// halt stops the run for a shutdown, a lost lease or a pause.
func (rn *run) halt(err error) {
	reason := reasonShutdown + err.Error()
	if errors.Is(err, ErrPaused) {
		reason = reasonPaused
		rn.r.log.Warn("retention_run_paused", "run_id", rn.id)
	} else if errors.Is(err, ErrLeaseLost) || errors.Is(err, store.ErrFenced) {
		reason = err.Error()
		if !strings.HasPrefix(reason, reasonLeaseLost) {
			reason = reasonLeaseLost + reason
		}
		rn.r.log.Warn("retention_lease_lost", "run_id", rn.id, "err", err)
		if errors.Is(err, store.ErrFenced) && rn.r.onFenced != nil {
			rn.r.onFenced(err)
		}
	}
	rn.setStop(&stopCause{status: audit.RunInterrupted, reason: reason})
}

// setStop records why the run stops; the first cause wins.
func (rn *run) setStop(c *stopCause) {
	if rn.stop == nil {
		rn.stop = c
	}
}

// isStop tells a requested stop (shutdown, lost lease, pause, or writes
// refused because a newer owner has written: a lost lease seen by the store)
// from a failure.
func isStop(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrPaused) || errors.Is(err, store.ErrFenced)
}

// scanRanges are the deletion-time ranges a scan with period reads: the
// entries due, then those stamped in the future (reported as clock skew).
func (rn *run) scanRanges(period time.Duration) [][2]int64 {
	cutoff := rn.at.Add(-period).UnixNano()
	future := rn.at.Add(clockSkew).UnixNano()
	var out [][2]int64
	for _, rg := range [][2]int64{{0, cutoff}, {future + 1, math.MaxInt64}} {
		if rg[0] <= rg[1] {
			out = append(out, rg)
		}
	}
	return out
}

// looked counts one entry a source looked at, reports progress, and says
// whether the source should go on.
func (rn *run) looked() error {
	rn.meter.seen1()
	rn.progress()
	if rn.done() {
		return store.ErrStopScan
	}
	return nil
}

// progress logs how a long run is going, about every progressEvery, and
// reports it to the caller's Progress more often.
func (rn *run) progress() {
	now := rn.r.now()
	if rn.meter.reportDue(now) {
		rn.reportProgress(now)
	}
	if !rn.meter.logDue(now) {
		return
	}
	p := rn.meter.at(now, int64(rn.claims.taken))
	t := rn.journal.tally()
	attrs := []any{"run_id", rn.id, "done", p.Done, "due", p.Due, "done_by_cause", countLog(p.DoneByCause),
		"due_by_cause", countLog(p.DueByCause), "items_done", p.Purged,
		"scanned", t.Scanned, "keys_deleted", t.KeysDeleted, "rate_per_sec", math.Round(p.Rate*10) / 10,
		"by_cause", causeLog(rn.journal.byCause)}
	if p.Left > 0 {
		attrs = append(attrs, "time_left", p.Left.Round(time.Second))
	}
	rn.r.log.Info("retention_run_progress", attrs...)
}

// eraseProgress logs each step of the erase step and shows where it is to
// the caller's Progress: once the scans are over the bar would otherwise sit
// at due/due for as long as the erase takes.
func (rn *run) eraseProgress(ep store.EraseProgress) {
	now := rn.r.now()
	newStep := ep.Step != store.EraseCompact || ep.Done == 0
	if newStep {
		rn.r.log.Info("retention_erase_progress", "run_id", rn.id, "step", ep.Step, "ranges_done", ep.Done, "ranges", ep.Total)
	}
	if newStep || rn.meter.reportDue(now) {
		p := rn.meter.at(now, int64(rn.claims.taken))
		p.Erase = &ep
		rn.meter.send(now, p)
	}
}

func (rn *run) reportProgress(now time.Time) {
	rn.meter.send(now, rn.meter.at(now, int64(rn.claims.taken)))
}

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

// item builds the audit record of a candidate.
func (c candidate) item(status, reason string) audit.Item {
	return audit.Item{
		ItemType:  string(c.kind),
		ItemID:    c.id,
		ThreadID:  c.tid,
		DeletedAt: unixTime(c.deletedTS),
		Status:    status,
		Cause:     c.cause,
		Reason:    reason,
		Replayed:  c.replay,
	}
}

func skippedItem(e store.DeletionEntry, reason string) audit.Item {
	return audit.Item{
		ItemType:  string(e.Kind),
		ItemID:    e.ID,
		ThreadID:  e.ThreadID,
		DeletedAt: unixTime(e.DeletedTS),
		Status:    audit.StatusSkipped,
		Cause:     audit.CauseDeleted,
		Reason:    reason,
	}
}

// unixTime renders a stored timestamp; zero (legacy, unknown) stays the
// zero time, which the audit writes as unknown.
func unixTime(ns int64) time.Time {
	if ns <= 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
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
