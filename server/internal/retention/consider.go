package retention

import (
	"context"
	"errors"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

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
