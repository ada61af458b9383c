package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"strings"
	"time"

	"github.com/progressdb/progressdb/audit"
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

// run is one retention run, from the lease to the footer.
type run struct {
	r       *Runner
	id      string
	trigger string
	dry     bool
	lease   *leaseSession
	release func() // stops the heartbeat, releases the lease and the slot

	w   *audit.Writer
	exp *audit.ExportWriter // nil unless exporting (never in a dry run)
	at  time.Time           // the run's reference time: cutoffs, due checks, stamps

	// purging holds the threads purged (or, in a dry run, that would be
	// purged) by this run or by an unfinished earlier one: their messages
	// go with them and are not looked at on their own.
	purging map[string]bool

	// Policies (sources.go): the overrides read at the start, those that
	// could not be read, what the run knows of threads whose live messages
	// it looked at, and the live messages it took (per message, and per
	// thread for a dry run's max_messages).
	overrides   map[string]store.RetentionOverride
	badOverride map[string]string
	threads     map[string]*liveThread
	takenLive   map[string]bool
	liveTaken   map[string]int64

	queue     []queuedPurge   // purge begun, export due (export.go)
	group     []finishedPurge // purged, audit record not yet durable
	groupKeys int

	pace    *pacer
	taken   int // items purged (or dry_run) by the scan, for MAX_ITEMS
	batches int // batch boundaries reached

	stop     *stopCause
	auditErr error

	scanned, eligible, purged, failed, skipped, stamped, keys int64
	byCause                                                   map[string]CauseCounts

	// due is the number of index entries due when the run started (-1:
	// not counted), seen those the scans have looked at; dueBy and seenBy
	// split them by cause, the cause of the source scanning now.
	due, seen     int64
	dueBy, seenBy map[string]int64
	cause         string
	report        func(Progress) // RunRequest.Progress

	// erase collects the spans this run purged; owed is set once the run
	// has recorded, before its first delete, that an erase is owed.
	erase    *store.EraseSpans
	owed     bool
	eraseAll bool // purges before this run's may not have been erased

	lastProgress time.Time
	lastReport   time.Time
}

// finishedPurge is a purged (or stamped) item whose audit record waits for
// the next durable group write; its marker goes once the record is synced.
type finishedPurge struct {
	marker store.PurgeMarker
	stamp  *store.StampMarker // set for a stamp instead of a purge
	item   audit.Item
}

// stopCause records why a run stopped before the end; the first one wins.
type stopCause struct {
	status string // footer status: completed, failed or interrupted
	reason string
	err    error // for failed runs: what Run returns
}

// candidate is what the run needs of a thread or message record.
type candidate struct {
	kind      store.ItemKind
	id, tid   string
	deleted   bool
	deletedTS int64
	legalHold bool
	cause     string            // audit.Cause*: why it is a candidate
	check     store.PolicyCheck // for the policy causes: what the claim re-checks
}

// execute performs the run begun by begin. It always releases the lease.
func (rn *run) execute(ctx context.Context) (Result, error) {
	defer rn.release()
	r := rn.r
	rn.at = r.now().UTC()
	rn.lastProgress = rn.at
	res := Result{RunID: rn.id, StartedAt: rn.at, DryRun: rn.dry}

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

	// The header records the policies in force; the overrides are read
	// once, from the override index: O(overrides).
	rn.badOverride = make(map[string]string)
	rn.threads = make(map[string]*liveThread)
	rn.takenLive = make(map[string]bool)
	rn.liveTaken = make(map[string]int64)
	overrides, err := rn.loadOverrides(ctx)
	if err != nil {
		return rn.failedToStart(res, stageScan, "read retention overrides", err)
	}
	info := rn.lease.info()
	w, err := audit.CreateWith(r.cfg.AuditPath, rn.id, audit.Header{
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
	}, r.auditOpts)
	if err != nil {
		// Fail closed: without a durable header nothing is deleted.
		return rn.failedToStart(res, stageAudit, "create audit file", err)
	}
	rn.w = w
	if r.cfg.ExportPath != "" && !rn.dry {
		// The file is made with the first record: a run that purges
		// nothing leaves none.
		if rn.exp, err = audit.NewExportWriter(r.cfg.ExportPath, rn.id, rn.at); err != nil {
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
	for _, src := range rn.sources() {
		if rn.stop != nil {
			break
		}
		rn.cause = src.cause
		src.scan(ctx)
	}
	// The last report shows where the scans ended, not where the last
	// timed report left them.
	rn.reportProgress(r.now())
	return rn.finish(ctx, res)
}

// failedToStart reports a run that failed before its audit header was
// written: nothing was deleted, and there is no file to close.
func (rn *run) failedToStart(res Result, stage, what string, err error) (Result, error) {
	r := rn.r
	r.metrics.countError(stage)
	r.metrics.Runs.WithLabelValues(resultFailed).Inc()
	res.FinishedAt = r.now().UTC()
	res.Status = audit.RunFailed
	res.Error = what + ": " + err.Error()
	r.metrics.RunDuration.Observe(res.FinishedAt.Sub(res.StartedAt).Seconds())
	r.last.Store(&res)
	r.log.Error("retention_run_failed", "run_id", rn.id, "trigger", rn.trigger, "stage", stage, "err", err)
	return res, fmt.Errorf("%s: %w", what, err)
}

// recoverPending finishes what earlier runs left: a purge marker means a
// purge began and its audit record may be missing. Dry runs only learn
// which threads are affected.
func (rn *run) recoverPending(ctx context.Context) {
	r := rn.r
	markers, err := r.st.PendingPurges(ctx)
	if err != nil {
		rn.fail(ctx, stageRecovery, "list pending purges", err)
		return
	}
	for _, m := range markers {
		if m.Kind == store.KindThread {
			rn.purging[m.ID] = true
		}
	}
	if rn.dry || len(markers) == 0 {
		return
	}
	r.log.Info("retention_recovery", "run_id", rn.id, "pending", len(markers))
	for _, m := range markers {
		if err := rn.checkpoint(ctx); err != nil {
			rn.halt(err)
			return
		}
		rn.scanned++
		it := audit.Item{
			ItemType:  string(m.Kind),
			ItemID:    m.ID,
			ThreadID:  m.ThreadID,
			DeletedAt: unixTime(m.DeletedTS),
			Cause:     m.Cause, // empty (deleted) for markers written before policies
		}
		exists, err := r.st.ItemExists(ctx, m.Kind, m.ID)
		if err != nil {
			rn.fail(ctx, stageRecovery, "check pending purge", err)
			return
		}
		it.Recovered = true
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
	rn.drainExports(ctx)
	rn.flush(ctx)
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
		m := m
		rn.group = append(rn.group, finishedPurge{stamp: &m, item: audit.Item{
			ItemType:  string(m.Kind),
			ItemID:    m.ID,
			ThreadID:  m.ThreadID,
			DeletedAt: unixTime(m.DeletedTS),
			Status:    audit.StatusStamped,
			Reason:    fmt.Sprintf(reasonRecoveredStamp, m.RunID),
			Recovered: true,
		}})
	}
	rn.flush(ctx)
}

// scan walks the deletion index of kind: the entries due for period, then
// those stamped in the future, which are reported as clock skew.
func (rn *run) scan(ctx context.Context, kind store.ItemKind, period time.Duration) {
	for _, rg := range rn.scanRanges(period) {
		err := rn.r.st.ScanDeletionIndex(ctx, kind, rg[0], rg[1], func(e store.DeletionEntry) error {
			rn.consider(ctx, e)
			rn.seen1()
			rn.progress()
			if rn.stop != nil {
				return store.ErrStopScan
			}
			return nil
		})
		if err != nil && rn.stop == nil {
			rn.fail(ctx, stageScan, "scan deletion index", err)
		}
		if rn.stop != nil {
			return
		}
	}
}

// consider applies the rules of spec §3 to one index entry, with the
// periods in force for its thread. The index only finds candidates: every
// decision is taken on the record as it is now.
func (rn *run) consider(ctx context.Context, e store.DeletionEntry) {
	if err := ctx.Err(); err != nil {
		rn.halt(err)
		return
	}
	if e.Kind == store.KindMessage && rn.purging[e.ThreadID] {
		return // the thread's purge takes the message with it
	}
	tid := e.ThreadID
	if e.Kind == store.KindThread {
		tid = e.ID
	}
	if why, bad := rn.badOverride[tid]; bad {
		rn.scanned++
		rn.record(skippedItem(e, "malformed retention override: "+why))
		return
	}
	period := rn.policyOf(tid).period
	if e.Kind == store.KindMessage {
		period = rn.policyOf(tid).messagePeriod
	}
	c, err := rn.load(ctx, e)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return // a stale entry, or purged with its thread
	case errors.Is(err, store.ErrMalformed):
		rn.scanned++
		rn.record(skippedItem(e, reasonMalformed+err.Error()))
		return
	case err != nil:
		rn.fail(ctx, stageScan, "read "+string(e.Kind), err)
		return
	}
	rn.scanned++
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
	rn.group = append(rn.group, finishedPurge{stamp: &m, item: c.item(audit.StatusStamped, reasonStamped)})
	if len(rn.group) >= flushItems {
		rn.flush(ctx)
	}
}

// take purges an eligible item (or records it in a dry run), whatever
// source found it.
func (rn *run) take(ctx context.Context, c candidate) {
	r := rn.r
	rn.taken++
	if c.kind == store.KindThread {
		rn.purging[c.id] = true
	}
	live := c.cause != audit.CauseDeleted
	if live {
		rn.takenLive[c.id] = true
		rn.liveTaken[c.tid]++
	}
	if rn.dry {
		rn.record(c.item(audit.StatusDryRun, ""))
	} else {
		if err := rn.checkpoint(ctx); err != nil {
			rn.halt(err)
			return
		}
		m := store.PurgeMarker{
			Kind:      c.kind,
			ID:        c.id,
			ThreadID:  c.tid,
			DeletedTS: c.deletedTS,
			RunID:     rn.id,
			StartedAt: r.now().UnixNano(),
			Cause:     c.cause,
		}
		var err error
		if live {
			err = r.st.BeginPolicyPurge(ctx, m, c.check)
		} else {
			err = r.st.BeginPurge(ctx, m)
		}
		switch {
		case errors.Is(err, store.ErrNotEligible):
			rn.taken--
			delete(rn.purging, c.id)
			if live {
				rn.liveTaken[c.tid]--
			}
			return // a restore, delete, edit race or hold won
		case err != nil:
			rn.fail(ctx, stagePurge, "begin purge", err)
			return
		}
		rn.purgeItem(ctx, m, c.item("", ""))
	}
	if r.cfg.MaxItems > 0 && rn.taken >= r.cfg.MaxItems && rn.stop == nil {
		rn.stop = &stopCause{status: audit.RunCompleted, reason: reasonMaxItems}
	}
}

// purge deletes an item's keys in batches, checking before every batch.
func (rn *run) purge(ctx context.Context, m store.PurgeMarker) (int, error) {
	if !rn.owed {
		// Whether earlier purges were all erased is read before this run's
		// first purge says they are not.
		erased, err := rn.r.st.Erased(ctx)
		if err != nil {
			return 0, err
		}
		if err := rn.r.st.OweErase(ctx); err != nil {
			return 0, err
		}
		rn.owed, rn.eraseAll = true, !erased
	}
	opts := store.PurgeOptions{BatchSize: rn.r.cfg.BatchSize, BeforeBatch: rn.beforeBatch, BatchLimit: rn.pace.batchLimit,
		Erase: rn.erase}
	var keys int
	var err error
	if m.Kind == store.KindThread {
		keys, err = rn.r.st.PurgeThread(ctx, m.ID, opts)
	} else {
		keys, err = rn.r.st.PurgeMessage(ctx, m.ThreadID, m.ID, opts)
	}
	rn.r.metrics.KeysDeleted.Add(float64(keys))
	return keys, err
}

// beforeBatch runs before every delete batch: it stops the purge on
// shutdown or when the lease is no longer safely ours, then paces,
// yielding to user writes (pace.go).
func (rn *run) beforeBatch(ctx context.Context) error {
	rn.batches++
	if h := rn.r.hooks.beforeBatch; h != nil {
		h(ctx, batchPoint{RunID: rn.id, Lease: rn.lease.lease, Audit: rn.w, N: rn.batches})
	}
	if err := rn.checkpoint(ctx); err != nil {
		return err
	}
	rn.pace.observe(rn.r.clock.Now())
	return sleep(ctx, rn.r.clock, jitter(rn.pace.pause()))
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
	if !rn.dry {
		if paused, err := rn.r.paused(ctx); paused {
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
	rn.group = append(rn.group, finishedPurge{marker: m, item: it})
	rn.groupKeys += keys
	if len(rn.group) >= flushItems || rn.groupKeys >= flushKeysFactor*rn.r.cfg.BatchSize {
		rn.flush(ctx)
	}
}

// flush makes a group of purges durable, in the order that keeps spec §5
// true through a crash at any instant: deletes synced before any "purged"
// record is written, records synced before any marker is cleared.
func (rn *run) flush(ctx context.Context) {
	if len(rn.group) == 0 || rn.auditErr != nil {
		return
	}
	// Once deletes have happened their records are owed, shutdown or not.
	ctx = context.WithoutCancel(ctx)
	r := rn.r
	if err := r.st.Sync(ctx); err != nil {
		rn.fail(ctx, stageSync, "sync store", err)
		return // markers stay: the next run writes the records
	}
	markers := make([]store.PurgeMarker, 0, len(rn.group))
	var stamps []store.StampMarker
	for _, p := range rn.group {
		if !rn.record(p.item) {
			return
		}
		if p.stamp != nil {
			stamps = append(stamps, *p.stamp)
		} else {
			markers = append(markers, p.marker)
		}
	}
	if err := rn.w.Sync(); err != nil {
		rn.auditFailed(err)
		return
	}
	if err := r.st.ClearPurges(ctx, markers); err != nil {
		rn.fail(ctx, stageSync, "clear purge markers", err)
		return
	}
	if err := r.st.ClearStamps(ctx, stamps); err != nil {
		rn.fail(ctx, stageSync, "clear stamp markers", err)
		return
	}
	rn.group = rn.group[:0]
	rn.groupKeys = 0
}

// record appends an item record and counts it. After an audit write error
// nothing more is written or deleted.
func (rn *run) record(it audit.Item) bool {
	if rn.auditErr != nil {
		return false
	}
	if err := rn.w.Item(it); err != nil {
		rn.auditFailed(err)
		return false
	}
	if it.Cause == "" {
		it.Cause = audit.CauseDeleted // as the writer wrote it
	}
	cc := rn.byCause[it.Cause]
	switch it.Status {
	case audit.StatusPurged:
		rn.purged++
		rn.eligible++
		cc.Purged++
		cc.Eligible++
		rn.r.metrics.ItemsPurged.WithLabelValues(it.ItemType, it.Cause).Inc()
	case audit.StatusFailed:
		rn.failed++
		rn.eligible++
		cc.Failed++
		cc.Eligible++
	case audit.StatusDryRun:
		rn.eligible++
		cc.Eligible++
	case audit.StatusSkipped:
		rn.skipped++
		cc.Skipped++
	case audit.StatusStamped:
		rn.stamped++
	}
	if rn.byCause == nil {
		rn.byCause = make(map[string]CauseCounts)
	}
	rn.byCause[it.Cause] = cc
	rn.keys += it.KeysDeleted
	return true
}

func (rn *run) auditFailed(err error) {
	rn.auditErr = err
	rn.r.metrics.countError(stageAudit)
	rn.r.log.Error("retention_audit_write_failed", "run_id", rn.id, "err", err)
	rn.stop = &stopCause{status: audit.RunFailed, reason: "audit write: " + err.Error(), err: fmt.Errorf("audit write: %w", err)}
}

// fail stops the run on an error of stage; a shutdown or lost lease
// showing through the error interrupts it instead.
func (rn *run) fail(ctx context.Context, stage, what string, err error) {
	if isStop(err) || ctx.Err() != nil {
		rn.halt(err)
		return
	}
	rn.r.metrics.countError(stage)
	rn.r.log.Error("retention_run_error", "run_id", rn.id, "stage", stage, "err", err)
	if what != "" { // empty when err already says what failed
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
	} else if errors.Is(err, ErrLeaseLost) {
		reason = err.Error()
		if !strings.HasPrefix(reason, reasonLeaseLost) {
			reason = reasonLeaseLost + reason
		}
		rn.r.log.Warn("retention_lease_lost", "run_id", rn.id, "err", err)
	}
	rn.setStop(&stopCause{status: audit.RunInterrupted, reason: reason})
}

func (rn *run) setStop(c *stopCause) {
	if rn.stop == nil {
		rn.stop = c
	}
}

// isStop tells a requested stop (shutdown, lost lease, pause) from a failure.
func isStop(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrPaused)
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

// progress logs how a long run is going, about every progressEvery, and
// reports it to the caller's Progress more often.
func (rn *run) progress() {
	now := rn.r.now()
	if rn.report != nil && now.Sub(rn.lastReport) >= progressReportEvery {
		rn.reportProgress(now)
	}
	if now.Sub(rn.lastProgress) < progressEvery {
		return
	}
	rn.lastProgress = now
	p := rn.progressAt(now)
	attrs := []any{"run_id", rn.id, "done", p.Done, "due", p.Due, "done_by_cause", countLog(p.DoneByCause),
		"due_by_cause", countLog(p.DueByCause), "items_done", p.Purged,
		"scanned", rn.scanned, "keys_deleted", rn.keys, "rate_per_sec", math.Round(p.Rate*10) / 10,
		"by_cause", causeLog(rn.byCause)}
	if p.Left > 0 {
		attrs = append(attrs, "time_left", p.Left.Round(time.Second).String())
	}
	rn.r.log.Info("retention_run_progress", attrs...)
}

func (rn *run) reportProgress(now time.Time) {
	if rn.report == nil {
		return
	}
	rn.lastReport = now
	rn.report(rn.progressAt(now))
}

// progressAt is the run's progress at now: entries looked at of those
// due, their rate, and the time left at that rate.
func (rn *run) progressAt(now time.Time) Progress {
	p := Progress{Done: rn.seen, Due: rn.due, Purged: int64(rn.taken)}
	if rn.due >= 0 {
		p.DueByCause, p.DoneByCause = maps.Clone(rn.dueBy), maps.Clone(rn.seenBy)
	}
	if elapsed := now.Sub(rn.at).Seconds(); elapsed > 0 {
		p.Rate = float64(rn.seen) / elapsed
	}
	if p.Rate > 0 && p.Due > p.Done {
		p.Left = time.Duration(float64(p.Due-p.Done) / p.Rate * float64(time.Second))
	}
	return p
}

// finish flushes, erases, writes the footer, and reports the run.
func (rn *run) finish(ctx context.Context, res Result) (Result, error) {
	r := rn.r
	rn.drainExports(ctx)
	rn.flush(ctx)
	var footer audit.Footer
	if err := rn.closeExport(&footer); err != nil && (rn.stop == nil || rn.stop.status == audit.RunCompleted) {
		rn.stop = &stopCause{status: audit.RunFailed, reason: "close export file: " + err.Error(),
			err: fmt.Errorf("close export file: %w", err)}
	}
	erased, eraseMS := rn.eraseStep(ctx)
	status, reason := audit.RunCompleted, ""
	var runErr error
	if rn.stop != nil {
		status, reason = rn.stop.status, rn.stop.reason
		if status == audit.RunFailed {
			runErr = fmt.Errorf("retention run %s: %w", rn.id, rn.stop.err)
		}
	}
	finished := r.now().UTC()
	footer.FinishedAt, footer.Status, footer.Reason = finished, status, reason
	footer.Scanned, footer.Eligible, footer.Purged = rn.scanned, rn.eligible, rn.purged
	footer.Failed, footer.Skipped, footer.Stamped = rn.failed, rn.skipped, rn.stamped
	footer.KeysDeleted, footer.DurationMS = rn.keys, finished.Sub(rn.at).Milliseconds()
	footer.Erased, footer.EraseMS = erased, eraseMS
	path, err := rn.w.Close(footer)
	if err != nil {
		r.metrics.countError(stageAudit)
		r.log.Error("retention_audit_close_failed", "run_id", rn.id, "err", err)
		path = rn.w.Path()
		if status != audit.RunFailed {
			status, reason = audit.RunFailed, "close audit file: "+err.Error()
		}
		if runErr == nil {
			runErr = fmt.Errorf("retention run %s: close audit file: %w", rn.id, err)
		}
	}

	res.FinishedAt = finished
	res.Status = status
	res.Scanned, res.Eligible, res.Purged = rn.scanned, rn.eligible, rn.purged
	res.Failed, res.Skipped, res.Stamped, res.KeysDeleted = rn.failed, rn.skipped, rn.stamped, rn.keys
	res.AuditFile = path
	if footer.Exported != nil {
		res.Exported, res.ExportFile = *footer.Exported, footer.ExportFile
	}
	res.ByCause = rn.byCause
	if status != audit.RunCompleted {
		res.Error = reason
	}

	label := status
	if status == audit.RunCompleted && rn.dry {
		label = resultDryRun
	}
	r.metrics.Runs.WithLabelValues(label).Inc()
	r.metrics.RunDuration.Observe(finished.Sub(rn.at).Seconds())
	r.metrics.EligibleItems.Set(float64(rn.eligible))
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
		"status", status, "reason", reason, "scanned", rn.scanned, "eligible", rn.eligible, "purged", rn.purged,
		"failed", rn.failed, "skipped", rn.skipped, "stamped", rn.stamped, "keys_deleted", rn.keys,
		"by_cause", causeLog(rn.byCause), "batches", rn.batches, "batches_yielded", rn.pace.yielded,
		"erased", erased, "erase_ms", eraseMS,
		"duration_ms", finished.Sub(rn.at).Milliseconds(), "audit_file", path, "export_file", footer.ExportFile)
	return res, runErr
}

// eraseStep makes what was purged unrecoverable from the data directory
// before the footer says so (docs/erasure.md). It runs after non-dry runs
// with ERASE on when this run purged something, or when purges of an
// earlier version or of a run that did not erase may have left content
// (then over the whole key space, once). A failed erase fails the run; a
// shutdown skips it and the next run erases everything.
func (rn *run) eraseStep(ctx context.Context) (bool, int64) {
	r := rn.r
	if rn.dry || !r.cfg.Erase || rn.auditErr != nil || ctx.Err() != nil {
		return false, 0
	}
	full := rn.eraseAll
	if !rn.owed {
		erased, err := r.st.Erased(ctx)
		if err != nil {
			rn.fail(ctx, stageErase, "erase", err)
			return false, 0
		}
		if erased {
			return false, 0 // nothing purged, nothing left over
		}
		full = true
	}
	start := time.Now()
	er, err := r.st.Erase(ctx, rn.erase, store.EraseOptions{Rate: int64(r.cfg.EraseRate) << 20, Full: full})
	took := time.Since(start)
	r.metrics.EraseDuration.Observe(took.Seconds())
	if err != nil {
		if rn.stop != nil && rn.stop.status == audit.RunCompleted {
			rn.stop = nil // a completed run (max_items) that did not erase has failed
		}
		rn.fail(ctx, stageErase, "", err) // the store's errors start with "erase: "
		return false, took.Milliseconds()
	}
	if er.Full {
		r.log.Info("retention_erase_full", "run_id", rn.id,
			"why", "content purged before erasure existed, or by a run that did not erase, may remain: whole key space erased once",
			"tables_removed", er.TablesRemoved, "logs_removed", er.LogsRemoved, "erase_ms", took.Milliseconds())
	} else {
		r.log.Info("retention_erased", "run_id", rn.id, "ranges", er.Ranges,
			"tables_removed", er.TablesRemoved, "logs_removed", er.LogsRemoved, "erase_ms", took.Milliseconds())
	}
	return true, took.Milliseconds()
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
	for _, c := range causes {
		if cc, ok := m[c]; ok {
			attrs = append(attrs, slog.Group(c, "eligible", cc.Eligible, "purged", cc.Purged))
		}
	}
	return slog.GroupValue(attrs...)
}
