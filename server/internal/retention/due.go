package retention

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// countDue counts, per source, the index entries the scans will look at,
// so progress can say how much is left of each cause. It reads the same
// index ranges as the scans (keys only where it can) and the threads with
// overrides, so it grows with what is due and with the overrides, never
// with the database. A failure only leaves the count unknown.
func (rn *run) countDue(ctx context.Context) {
	r := rn.r
	var n int64
	by := make(map[string]int64)
	for _, src := range rn.sources() {
		if src.count == nil {
			continue
		}
		c, err := src.count(ctx)
		if err != nil {
			r.log.Warn("retention_count_due_failed", "run_id", rn.id, "cause", src.cause, "err", err)
			rn.due = -1
			return
		}
		n += c
		if c > 0 {
			by[src.cause] += c
		}
	}
	rn.due, rn.dueBy = n, by
	r.log.Info("retention_run_due", "run_id", rn.id, "due", n, "due_by_cause", countLog(by))
	rn.reportProgress(r.now())
}

// countDeleted counts the deletion-index entries of kind that scan reads.
func (rn *run) countDeleted(ctx context.Context, kind store.ItemKind, period time.Duration) (int64, error) {
	var n int64
	for _, rg := range rn.scanRanges(period) {
		err := rn.r.st.ScanDeletionIndex(ctx, kind, rg[0], rg[1], func(store.DeletionEntry) error { n++; return nil })
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

// countMaxAge counts the live messages scanMaxAge looks at: the age index
// up to the global cutoff, less the threads with their own max_age, whose
// logs it reads up to their own cutoff instead.
func (rn *run) countMaxAge(ctx context.Context) (int64, error) {
	r := rn.r
	ownAge := func(o store.RetentionOverride) bool { return o.MaxAge != nil }
	var n int64
	if maxAge := r.cfg.MaxAge; maxAge > 0 {
		cutoff := rn.at.Add(-maxAge).UnixNano()
		err := r.st.ScanAgeIndex(ctx, 0, cutoff-1, func(e store.AgeEntry) error {
			if o, ok := rn.overrides[e.ThreadID]; !ok || !ownAge(o) {
				n++
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	for _, tid := range rn.overridden(ownAge) {
		maxAge := rn.policyOf(tid).maxAge
		if maxAge <= 0 {
			continue
		}
		if loses, err := rn.losesLive(ctx, tid); err != nil || !loses {
			if err != nil {
				return 0, err
			}
			continue // scanMaxAge reads one of its messages, counted as none
		}
		cutoff := rn.at.Add(-maxAge).UnixNano()
		err := r.st.ScanLiveMessages(ctx, tid, cutoff, func(store.AgeEntry) error { n++; return nil })
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

// countMaxMessages counts the messages beyond their thread's cap, from the
// count index and the overridden threads' counts. A thread that will lose
// nothing (on hold, deleted, unreadable) is left out, as trimThread stops
// at its first message; what max_age takes first is counted in both, so
// the count is an upper bound when both policies apply to a thread.
func (rn *run) countMaxMessages(ctx context.Context) (int64, error) {
	r := rn.r
	ownCap := func(o store.RetentionOverride) bool { return o.MaxMessages != nil }
	var n int64
	add := func(tid string, count, keep int64) error {
		if count <= keep || rn.purging[tid] {
			return nil
		}
		if _, bad := rn.badOverride[tid]; bad {
			return nil
		}
		t, err := r.st.GetThread(ctx, tid)
		switch {
		case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrMalformed):
			return nil
		case err != nil:
			return err
		case t.Deleted || t.LegalHold:
			return nil
		}
		n += count - keep
		return nil
	}
	if keep := int64(r.cfg.MaxMessages); keep > 0 {
		err := r.st.ScanThreadsOverCount(ctx, keep, func(tid string, count int64) error {
			if o, ok := rn.overrides[tid]; ok && ownCap(o) {
				return nil
			}
			return add(tid, count, keep)
		})
		if err != nil {
			return 0, err
		}
	}
	for _, tid := range rn.overridden(ownCap) {
		keep := int64(rn.policyOf(tid).maxMessages)
		if keep <= 0 {
			continue
		}
		count, err := r.st.LiveCount(ctx, tid)
		if err != nil {
			return 0, err
		}
		if err := add(tid, count, keep); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// countLog renders per-cause counts in the fixed cause order.
func countLog(m map[string]int64) slog.Value {
	var attrs []slog.Attr
	for _, c := range causes {
		if v, ok := m[c]; ok {
			attrs = append(attrs, slog.Int64(c, v))
		}
	}
	return slog.GroupValue(attrs...)
}
