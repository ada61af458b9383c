package retention

import (
	"context"
	"errors"
	"math"
	"slices"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A run finds its candidates through sources, one per cause and index.
// Every source hands what it finds to the same checks and the same purge
// (take): lease checks before every batch, chunked batches, purge markers,
// crash-exact audit, export, erasure, and the legal hold re-checked under
// the thread's lock by the store. What a source reads grows with what is
// due and with the threads that have overrides, not with the database.
type source struct {
	cause string
	scan  func(ctx context.Context)
	// count, when set, counts the entries scan will look at (due.go);
	// what a source leaves uncounted is not counted as done either.
	count func(ctx context.Context) (int64, error)
}

// sources lists the run's sources in the order they run: soft deletes
// first (a thread purged for them takes its messages along), then the
// age limit, then the per-thread cap, which counts what max_age left.
func (rn *run) sources() []source {
	return []source{
		{audit.CauseDeleted, func(ctx context.Context) { rn.scan(ctx, store.KindThread, rn.r.cfg.Period) },
			func(ctx context.Context) (int64, error) {
				return rn.countDeleted(ctx, store.KindThread, rn.r.cfg.Period)
			}},
		{audit.CauseDeleted, func(ctx context.Context) { rn.scan(ctx, store.KindMessage, rn.r.cfg.MessagePeriod) },
			func(ctx context.Context) (int64, error) {
				return rn.countDeleted(ctx, store.KindMessage, rn.r.cfg.MessagePeriod)
			}},
		{audit.CauseDeleted, rn.scanShorterPeriods, nil},
		{audit.CauseMaxAge, rn.scanMaxAge, rn.countMaxAge},
		{audit.CauseMaxMessages, rn.scanMaxMessages, rn.countMaxMessages},
	}
}

// loadOverrides reads every thread's override once, at the start of the
// run, from the override index: O(overrides). It returns their number.
func (rn *run) loadOverrides(ctx context.Context) (int, error) {
	rn.overrides = make(map[string]store.RetentionOverride)
	n := 0
	err := rn.r.st.ScanRetentionOverrides(ctx, func(e store.OverrideEntry) error {
		n++
		if e.Err != nil {
			// An override that cannot be read might have been longer than
			// the global policy: nothing of the thread is purged.
			rn.badOverride[e.ThreadID] = e.Err.Error()
			return nil
		}
		rn.overrides[e.ThreadID] = e.Override
		return nil
	})
	return n, err
}

// policyOf is the policy in force for thread tid in this run.
func (rn *run) policyOf(tid string) policy {
	return rn.r.globalPolicy().with(rn.overrides[tid])
}

// overridden lists the threads whose override sets the field pick reads,
// in ID order (a run is reproducible).
func (rn *run) overridden(pick func(store.RetentionOverride) bool) []string {
	var out []string
	for tid, o := range rn.overrides {
		if pick(o) {
			out = append(out, tid)
		}
	}
	slices.Sort(out)
	return out
}

// scanShorterPeriods finds what the deletion-index scans cannot: items of
// threads whose override period is shorter than the global one, deleted
// after the global cutoff. It reads those threads only.
func (rn *run) scanShorterPeriods(ctx context.Context) {
	r := rn.r
	for _, tid := range rn.overridden(func(o store.RetentionOverride) bool { return o.Period != nil || o.MessagePeriod != nil }) {
		if rn.stop != nil {
			return
		}
		p := rn.policyOf(tid)
		if p.period < r.cfg.Period {
			t, err := r.st.GetThread(ctx, tid)
			switch {
			case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrMalformed):
				// Gone, or reported by the deletion-index scan.
			case err != nil:
				rn.fail(ctx, stageScan, "read thread", err)
				return
			case t.Deleted && t.DeletedTS > rn.at.Add(-r.cfg.Period).UnixNano():
				rn.consider(ctx, store.DeletionEntry{Kind: store.KindThread, ID: tid, ThreadID: tid, DeletedTS: t.DeletedTS})
			}
		}
		if p.messagePeriod >= r.cfg.MessagePeriod || rn.stop != nil || rn.purging[tid] {
			continue
		}
		global := rn.at.Add(-r.cfg.MessagePeriod).UnixNano()
		err := r.st.ScanThreadLog(ctx, tid, math.MaxInt64, func(e store.LogEntry) error {
			if e.Deleted && e.DeletedTS > global {
				rn.consider(ctx, store.DeletionEntry{Kind: store.KindMessage, ID: e.MessageID, ThreadID: tid, DeletedTS: e.DeletedTS})
			}
			if rn.stop != nil {
				return store.ErrStopScan
			}
			return nil
		})
		if err != nil && rn.stop == nil {
			rn.fail(ctx, stageScan, "scan thread log", err)
		}
	}
}

// scanMaxAge finds live messages older than the age limit: through the age
// index up to the global cutoff, and through their own logs for threads
// whose override sets max_age (those are skipped in the index scan).
func (rn *run) scanMaxAge(ctx context.Context) {
	r := rn.r
	ownAge := func(o store.RetentionOverride) bool { return o.MaxAge != nil }
	if maxAge := r.cfg.MaxAge; maxAge > 0 {
		cutoff := rn.at.Add(-maxAge).UnixNano()
		err := r.st.ScanAgeIndex(ctx, 0, cutoff-1, func(e store.AgeEntry) error {
			if o, ok := rn.overrides[e.ThreadID]; !ok || !ownAge(o) {
				rn.considerLive(ctx, e, audit.CauseMaxAge, store.PolicyCheck{CreatedBefore: cutoff})
			}
			return rn.scanned1()
		})
		if err != nil && rn.stop == nil {
			rn.fail(ctx, stageScan, "scan age index", err)
		}
	}
	for _, tid := range rn.overridden(ownAge) {
		maxAge := rn.policyOf(tid).maxAge
		if rn.stop != nil {
			return
		}
		if maxAge <= 0 {
			continue // off for this thread
		}
		cutoff := rn.at.Add(-maxAge).UnixNano()
		loses, err := rn.losesLive(ctx, tid)
		if err != nil {
			rn.fail(ctx, stageScan, "read thread", err)
			return
		}
		err = r.st.ScanLiveMessages(ctx, tid, cutoff, func(e store.AgeEntry) error {
			if !loses {
				// Held, deleted or unreadable: the first old message has
				// the hold recorded; the rest of its log, which grows for
				// as long as the hold lasts, is not read.
				rn.considerLive(ctx, e, audit.CauseMaxAge, store.PolicyCheck{CreatedBefore: cutoff})
				return store.ErrStopScan
			}
			rn.considerLive(ctx, e, audit.CauseMaxAge, store.PolicyCheck{CreatedBefore: cutoff})
			return rn.scanned1()
		})
		if err != nil && rn.stop == nil {
			rn.fail(ctx, stageScan, "scan thread log", err)
		}
	}
}

// scanMaxMessages finds threads holding more live messages than their
// cap, through the count index for the global cap and by their counts for
// threads whose override sets max_messages, and takes their oldest.
func (rn *run) scanMaxMessages(ctx context.Context) {
	r := rn.r
	ownCap := func(o store.RetentionOverride) bool { return o.MaxMessages != nil }
	type over struct {
		tid         string
		count, keep int64
	}
	var due []over
	if keep := int64(r.cfg.MaxMessages); keep > 0 {
		err := r.st.ScanThreadsOverCount(ctx, keep, func(tid string, count int64) error {
			if o, ok := rn.overrides[tid]; !ok || !ownCap(o) {
				due = append(due, over{tid, count, keep})
			}
			return ctx.Err()
		})
		if err != nil {
			rn.fail(ctx, stageScan, "scan count index", err)
			return
		}
	}
	for _, tid := range rn.overridden(ownCap) {
		keep := int64(rn.policyOf(tid).maxMessages)
		if keep <= 0 {
			continue // off for this thread
		}
		count, err := r.st.LiveCount(ctx, tid)
		if err != nil {
			rn.fail(ctx, stageScan, "read live count", err)
			return
		}
		if count > keep {
			due = append(due, over{tid, count, keep})
		}
	}
	for _, d := range due {
		if rn.stop != nil {
			return
		}
		rn.trimThread(ctx, d.tid, d.count, d.keep)
	}
}

// trimThread takes the oldest live messages of tid beyond its newest keep.
// In a real run the count already left out what this run purged; a dry
// run purges nothing, so it subtracts what it would have.
func (rn *run) trimThread(ctx context.Context, tid string, count, keep int64) {
	if !rn.dry {
		c, err := rn.r.st.LiveCount(ctx, tid)
		if err != nil {
			rn.fail(ctx, stageScan, "read live count", err)
			return
		}
		count = c
	}
	excess := count - keep
	if rn.dry {
		excess -= rn.liveTaken[tid]
	}
	if excess <= 0 {
		return
	}
	err := rn.r.st.ScanLiveMessages(ctx, tid, math.MaxInt64, func(e store.AgeEntry) error {
		if rn.takenLive[e.MessageID] {
			return nil
		}
		before := rn.liveTaken[tid]
		if !rn.considerLive(ctx, e, audit.CauseMaxMessages, store.PolicyCheck{KeepNewest: keep}) {
			return store.ErrStopScan // the thread is held, deleted or unreadable
		}
		if rn.liveTaken[tid] > before {
			excess--
		}
		if err := rn.scanned1(); err != nil || excess <= 0 {
			return store.ErrStopScan
		}
		return nil
	})
	if err != nil && rn.stop == nil {
		rn.fail(ctx, stageScan, "scan thread log", err)
	}
}

// seen1 counts one index entry looked at, for the cause being scanned.
func (rn *run) seen1() {
	rn.seen++
	if rn.seenBy == nil {
		rn.seenBy = make(map[string]int64)
	}
	rn.seenBy[rn.cause]++
}

// scanned1 counts one index entry looked at and says whether to go on.
func (rn *run) scanned1() error {
	rn.seen1()
	rn.progress()
	if rn.stop != nil {
		return store.ErrStopScan
	}
	return nil
}

// liveThread is what a run knows of a thread whose live messages a policy
// may purge; read once per run.
type liveThread struct {
	skip   bool            // gone, deleted (kept whole for its restore window) or unreadable
	hold   bool            // on legal hold: loses nothing
	held   map[string]bool // causes for which the hold was recorded
	reason string          // why an unreadable thread is skipped
}

func (rn *run) liveThreadState(ctx context.Context, tid string) (*liveThread, error) {
	if lt, ok := rn.threads[tid]; ok {
		return lt, nil
	}
	lt := &liveThread{}
	t, err := rn.r.st.GetThread(ctx, tid)
	switch {
	case errors.Is(err, store.ErrNotFound):
		lt.skip = true
	case errors.Is(err, store.ErrMalformed):
		lt.skip, lt.reason = true, "malformed thread record: "+err.Error()
	case err != nil:
		return nil, err
	default:
		lt.skip, lt.hold = t.Deleted, t.LegalHold
	}
	if why, bad := rn.badOverride[tid]; bad {
		lt.skip, lt.reason = true, "malformed retention override: "+why
	}
	rn.threads[tid] = lt
	return lt, nil
}

// losesLive reports whether live messages of tid can be taken at all in
// this run: not when the thread is on hold, deleted, gone or unreadable.
func (rn *run) losesLive(ctx context.Context, tid string) (bool, error) {
	if rn.purging[tid] {
		return false, nil
	}
	lt, err := rn.liveThreadState(ctx, tid)
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
	if rn.purging[e.ThreadID] || rn.takenLive[e.MessageID] {
		return true
	}
	lt, err := rn.liveThreadState(ctx, e.ThreadID)
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
			rn.scanned++
			rn.record(audit.Item{ItemType: audit.ItemThread, ItemID: e.ThreadID, ThreadID: e.ThreadID,
				Status: audit.StatusSkipped, Cause: cause, Reason: reason})
		}
		return false
	}
	rn.scanned++
	rn.take(ctx, candidate{kind: store.KindMessage, id: e.MessageID, tid: e.ThreadID, cause: cause, check: check})
	return true
}
