package retention

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A run finds its candidates through sources, one per cause and index.
// Every source hands what it finds to the same checks and the same claim
// (run.take): lease checks before every batch, chunked batches, purge
// markers, the claim re-checked before anything irreversible, crash-exact
// audit, export, erasure. What a source reads grows with what is due and
// with the threads that have overrides, not with the database. Each
// source keeps its scan and its count of what is due together, so the two
// read the same ranges.
type source interface {
	// cause is the cause of what the source finds.
	cause() string
	// scan hands the source's candidates to the run until it has none
	// left or the run is done; it returns what went wrong, if anything.
	scan(ctx context.Context, rn *run) error
	// count counts the entries scan will look at (progress); what a
	// source leaves uncounted is not counted as done either.
	count(ctx context.Context, rn *run) (int64, error)
}

var (
	_ source = deletedSource{}
	_ source = shorterPeriodsSource{}
	_ source = maxAgeSource{}
	_ source = maxMessagesSource{}
)

// policySources are the sources of a scheduled or requested run, in the
// order they run: soft deletes first (a thread purged for them takes its
// messages along), then the age limit, then the per-thread cap, which
// counts what max_age left.
func policySources() []source {
	return []source{
		deletedSource{kind: store.KindThread},
		deletedSource{kind: store.KindMessage},
		deletedAttachmentsSource{},
		shorterPeriodsSource{},
		maxAgeSource{},
		maxMessagesSource{},
	}
}

// deletedSource walks the deletion index of one kind: the entries due for
// the global period, then those stamped in the future, which are reported
// as clock skew.
type deletedSource struct{ kind store.ItemKind }

func (deletedSource) cause() string { return audit.CauseDeleted }

func (s deletedSource) period(rn *run) time.Duration {
	if s.kind == store.KindThread {
		return rn.r.cfg.Period
	}
	return rn.r.cfg.MessagePeriod
}

func (s deletedSource) scan(ctx context.Context, rn *run) error {
	for _, rg := range rn.scanRanges(s.period(rn)) {
		err := rn.r.st.ScanDeletionIndex(ctx, s.kind, rg[0], rg[1], func(e store.DeletionEntry) error {
			rn.consider(ctx, e)
			return rn.looked()
		})
		if err != nil {
			return fmt.Errorf("scan deletion index: %w", err)
		}
		if rn.done() {
			return nil
		}
	}
	return nil
}

func (s deletedSource) count(ctx context.Context, rn *run) (int64, error) {
	var n int64
	for _, rg := range rn.scanRanges(s.period(rn)) {
		err := rn.r.st.ScanDeletionIndex(ctx, s.kind, rg[0], rg[1], func(store.DeletionEntry) error { n++; return nil })
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

// shorterPeriodsSource finds what the deletion-index scans cannot: items
// of threads whose override period is shorter than the global one,
// deleted after the global cutoff. It reads those threads only, and
// counts nothing: it looks at no index entry.
type shorterPeriodsSource struct{}

func (shorterPeriodsSource) cause() string { return audit.CauseDeleted }

func (shorterPeriodsSource) count(context.Context, *run) (int64, error) { return 0, nil }

func (shorterPeriodsSource) scan(ctx context.Context, rn *run) error {
	cfg := rn.r.cfg
	st := rn.r.st
	for _, tid := range rn.policy.overridden(setsPeriods) {
		if rn.done() {
			return nil
		}
		p := rn.policy.of(tid)
		if p.period < cfg.Period {
			t, err := st.GetThread(ctx, tid)
			switch {
			case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrMalformed):
				// Gone, or reported by the deletion-index scan.
			case err != nil:
				return fmt.Errorf("read thread: %w", err)
			case t.Deleted && t.DeletedTS > rn.at.Add(-cfg.Period).UnixNano():
				rn.consider(ctx, store.DeletionEntry{Kind: store.KindThread, ID: tid, ThreadID: tid, DeletedTS: t.DeletedTS})
			}
		}
		if p.messagePeriod >= cfg.MessagePeriod || rn.done() || rn.claims.purging(tid) {
			continue
		}
		global := rn.at.Add(-cfg.MessagePeriod).UnixNano()
		err := st.ScanThreadLog(ctx, tid, math.MaxInt64, func(e store.LogEntry) error {
			if e.Deleted && e.DeletedTS > global {
				rn.consider(ctx, store.DeletionEntry{Kind: store.KindMessage, ID: e.MessageID, ThreadID: tid, DeletedTS: e.DeletedTS})
			}
			if rn.done() {
				return store.ErrStopScan
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("scan thread log: %w", err)
		}
		// Its attachments deleted on their own, likewise.
		err = st.ScanAttachments(ctx, tid, "", func(a store.Attachment) error {
			if a.Deleted && a.DeletedTS > global {
				rn.considerAttachment(ctx, store.AttachmentDeletion{Thread: tid, Message: a.Message, ID: a.ID, DeletedTS: a.DeletedTS})
			}
			if rn.done() {
				return store.ErrStopScan
			}
			return nil
		})
		if err != nil && !errors.Is(err, store.ErrStopScan) {
			return fmt.Errorf("scan thread attachments: %w", err)
		}
	}
	return nil
}

// maxAgeSource finds live messages older than the age limit: through the
// age index up to the global cutoff, and through their own logs for
// threads whose override sets max_age (those are skipped in the index
// scan).
type maxAgeSource struct{}

func (maxAgeSource) cause() string { return audit.CauseMaxAge }

func (maxAgeSource) scan(ctx context.Context, rn *run) error {
	st := rn.r.st
	if maxAge := rn.r.cfg.MaxAge; maxAge > 0 {
		cutoff := rn.at.Add(-maxAge).UnixNano()
		err := st.ScanAgeIndex(ctx, 0, cutoff-1, func(e store.AgeEntry) error {
			if !rn.policy.ownsField(e.ThreadID, setsMaxAge) {
				rn.considerLive(ctx, e, audit.CauseMaxAge, store.PolicyCheck{CreatedBefore: cutoff})
			}
			return rn.looked()
		})
		if err != nil {
			return fmt.Errorf("scan age index: %w", err)
		}
	}
	for _, tid := range rn.policy.overridden(setsMaxAge) {
		maxAge := rn.policy.of(tid).maxAge
		if rn.done() {
			return nil
		}
		if maxAge <= 0 {
			continue // off for this thread
		}
		cutoff := rn.at.Add(-maxAge).UnixNano()
		loses, err := rn.losesLive(ctx, tid)
		if err != nil {
			return fmt.Errorf("read thread: %w", err)
		}
		err = st.ScanLiveMessages(ctx, tid, cutoff, func(e store.AgeEntry) error {
			rn.considerLive(ctx, e, audit.CauseMaxAge, store.PolicyCheck{CreatedBefore: cutoff})
			if !loses {
				// Held, deleted or unreadable: the first old message has
				// the hold recorded; the rest of its log, which grows for
				// as long as the hold lasts, is not read.
				return store.ErrStopScan
			}
			return rn.looked()
		})
		if err != nil {
			return fmt.Errorf("scan thread log: %w", err)
		}
	}
	return nil
}

// count counts the live messages scan looks at: the age index up to the
// global cutoff, less the threads with their own max_age, whose logs it
// reads up to their own cutoff instead.
func (maxAgeSource) count(ctx context.Context, rn *run) (int64, error) {
	st := rn.r.st
	var n int64
	if maxAge := rn.r.cfg.MaxAge; maxAge > 0 {
		cutoff := rn.at.Add(-maxAge).UnixNano()
		err := st.ScanAgeIndex(ctx, 0, cutoff-1, func(e store.AgeEntry) error {
			if !rn.policy.ownsField(e.ThreadID, setsMaxAge) {
				n++
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	for _, tid := range rn.policy.overridden(setsMaxAge) {
		maxAge := rn.policy.of(tid).maxAge
		if maxAge <= 0 {
			continue
		}
		if loses, err := rn.losesLive(ctx, tid); err != nil || !loses {
			if err != nil {
				return 0, err
			}
			continue // scan reads one of its messages, counted as none
		}
		cutoff := rn.at.Add(-maxAge).UnixNano()
		err := st.ScanLiveMessages(ctx, tid, cutoff, func(store.AgeEntry) error { n++; return nil })
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

// maxMessagesSource finds threads holding more live messages than their
// cap, through the count index for the global cap and by their counts for
// threads whose override sets max_messages, and takes their oldest.
type maxMessagesSource struct{}

func (maxMessagesSource) cause() string { return audit.CauseMaxMessages }

// overCap is a thread with more live messages than it keeps.
type overCap struct {
	tid         string
	count, keep int64
}

// over lists the threads over their cap, by the count index and the
// overridden threads' counts.
func (maxMessagesSource) over(ctx context.Context, rn *run, fn func(overCap) error) error {
	st := rn.r.st
	if keep := int64(rn.r.cfg.MaxMessages); keep > 0 {
		err := st.ScanThreadsOverCount(ctx, keep, func(tid string, count int64) error {
			if rn.policy.ownsField(tid, setsMaxMessages) {
				return ctx.Err()
			}
			if err := fn(overCap{tid, count, keep}); err != nil {
				return err
			}
			return ctx.Err()
		})
		if err != nil {
			return fmt.Errorf("scan count index: %w", err)
		}
	}
	for _, tid := range rn.policy.overridden(setsMaxMessages) {
		keep := int64(rn.policy.of(tid).maxMessages)
		if keep <= 0 {
			continue // off for this thread
		}
		count, err := st.LiveCount(ctx, tid)
		if err != nil {
			return fmt.Errorf("read live count: %w", err)
		}
		if count > keep {
			if err := fn(overCap{tid, count, keep}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s maxMessagesSource) scan(ctx context.Context, rn *run) error {
	var due []overCap
	if err := s.over(ctx, rn, func(o overCap) error { due = append(due, o); return nil }); err != nil {
		return err
	}
	for _, d := range due {
		if rn.done() {
			return nil
		}
		if err := s.trim(ctx, rn, d); err != nil {
			return err
		}
	}
	return nil
}

// trim takes the oldest live messages of a thread beyond its newest keep.
// In a real run the count already left out what this run purged; a dry
// run purges nothing, so it subtracts what it would have.
func (maxMessagesSource) trim(ctx context.Context, rn *run, d overCap) error {
	count := d.count
	if !rn.dry {
		c, err := rn.r.st.LiveCount(ctx, d.tid)
		if err != nil {
			return fmt.Errorf("read live count: %w", err)
		}
		count = c
	}
	excess := count - d.keep
	if rn.dry {
		excess -= rn.claims.perThread[d.tid]
	}
	if excess <= 0 {
		return nil
	}
	err := rn.r.st.ScanLiveMessages(ctx, d.tid, math.MaxInt64, func(e store.AgeEntry) error {
		if rn.claims.live[e.MessageID] {
			return nil
		}
		before := rn.claims.perThread[d.tid]
		if !rn.considerLive(ctx, e, audit.CauseMaxMessages, store.PolicyCheck{KeepNewest: d.keep}) {
			return store.ErrStopScan // the thread is held, deleted or unreadable
		}
		if rn.claims.perThread[d.tid] > before {
			excess--
		}
		if err := rn.looked(); err != nil || excess <= 0 {
			return store.ErrStopScan
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("scan thread log: %w", err)
	}
	return nil
}

// count counts the messages beyond their thread's cap. A thread that will
// lose nothing (on hold, deleted, unreadable) is left out, as trim stops at
// its first message; what max_age takes first is counted in both, so the
// count is an upper bound when both policies apply to a thread.
func (s maxMessagesSource) count(ctx context.Context, rn *run) (int64, error) {
	var n int64
	err := s.over(ctx, rn, func(o overCap) error {
		if rn.claims.purging(o.tid) {
			return nil
		}
		if _, bad := rn.policy.bad[o.tid]; bad {
			return nil
		}
		t, err := rn.r.st.GetThread(ctx, o.tid)
		switch {
		case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrMalformed):
			return nil
		case err != nil:
			return err
		case t.Deleted || t.LegalHold:
			return nil
		}
		n += o.count - o.keep
		return nil
	})
	return n, err
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
