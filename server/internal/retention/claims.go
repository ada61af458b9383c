package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// reasonOverride prefixes the reason of a claim given back because the
// thread's policy, as it is now, no longer makes the item due.
const reasonOverride = "override: "

// claims is what a run has taken. A claim is the item's purge marker,
// written by the store after it re-checked the item under the thread's
// lock; before anything irreversible (an export record, the first delete)
// the claim is re-checked once more in one place, confirm, against the
// thread's hold and override as they are then, and given back if either
// now wins. MAX_ITEMS is a limit on claims, not a way to stop the run.
type claims struct {
	st     *store.Store
	runID  string
	dry    bool
	at     time.Time        // the run's reference time
	now    func() time.Time // stamps the markers
	policy *policySnapshot
	limit  int // MAX_ITEMS; 0: none

	taken int // items claimed (or, in a dry run, that would be)
	// threads are purged by this run or an unfinished earlier one: their
	// messages go with them and are not looked at on their own.
	threads map[string]bool
	// live are the live messages claimed for a policy, perThread their
	// number per thread (a dry run's max_messages subtracts it).
	live      map[string]bool
	perThread map[string]int64
}

func newClaims(r *Runner, runID string, dry bool, at time.Time, p *policySnapshot) *claims {
	return &claims{st: r.st, runID: runID, dry: dry, at: at, now: r.now, policy: p, limit: r.cfg.MaxItems,
		threads: make(map[string]bool), live: make(map[string]bool), perThread: make(map[string]int64)}
}

// full reports whether MAX_ITEMS claims were made: the sources stop.
func (c *claims) full() bool { return c.limit > 0 && c.taken >= c.limit }

// purging reports whether thread tid is being purged whole.
func (c *claims) purging(tid string) bool { return c.threads[tid] }

// take claims a candidate. In a real run the store writes the marker after
// re-checking the item under the thread's lock; taken is false when it
// refused (a restore, delete, edit or hold won meanwhile), and why is set
// when the refusal is to be recorded: a thread claim is re-checked against
// the thread's override when it is made, since from then on the override
// cannot change.
func (c *claims) take(ctx context.Context, cand candidate) (m store.PurgeMarker, taken bool, why string, err error) {
	c.note(cand.kind, cand.id, cand.tid, cand.cause, +1)
	if c.dry {
		return m, true, "", nil
	}
	m = store.PurgeMarker{Kind: cand.kind, ID: cand.id, ThreadID: cand.tid, DeletedTS: cand.deletedTS,
		RunID: c.runID, StartedAt: c.now().UnixNano(), Cause: cand.cause}
	switch {
	case cand.replay:
		m, err = c.st.BeginReplayPurge(ctx, m)
	case cand.cause != audit.CauseDeleted:
		err = c.st.BeginPolicyPurge(ctx, m, cand.check)
	case cand.kind == store.KindThread:
		err = c.st.BeginPurgeChecked(ctx, m, func(s store.ClaimState) error { return c.recheck(m, s) })
	default:
		err = c.st.BeginPurge(ctx, m)
	}
	if err == nil {
		return m, true, "", nil
	}
	c.note(cand.kind, cand.id, cand.tid, cand.cause, -1)
	switch {
	case errors.Is(err, store.ErrClaimReleased):
		return m, false, reasonOf(err), nil
	case errors.Is(err, store.ErrNotEligible):
		return m, false, "", nil
	}
	return m, false, "", fmt.Errorf("begin purge: %w", err)
}

// note counts a claim made (+1) or given back (-1).
func (c *claims) note(kind store.ItemKind, id, tid, cause string, delta int) {
	c.taken += delta
	if kind == store.KindThread {
		if delta > 0 {
			c.threads[id] = true
		} else {
			delete(c.threads, id)
		}
	}
	if cause != audit.CauseDeleted {
		c.live[id] = delta > 0
		c.perThread[tid] += int64(delta)
	}
}

// resumed notes the claims of earlier runs: their threads go whole.
func (c *claims) resumed(ms []store.PurgeMarker) {
	for _, m := range ms {
		if m.Kind == store.KindThread {
			c.threads[m.ID] = true
		}
	}
}

// confirm is the one re-check of a message claim before anything
// irreversible, under the thread's lock (store.ConfirmPurge): every stage
// that can still delete goes through it. It returns the confirmed marker,
// or the reason the claim was given back (marker cleared, nothing
// deleted). From a confirmation on, a hold or override of the thread
// answers 409 until the purge is recorded. A thread claim was re-checked
// when it was made (take) and cannot be overtaken since.
func (c *claims) confirm(ctx context.Context, m store.PurgeMarker) (store.PurgeMarker, string, error) {
	if m.Kind == store.KindThread {
		return m, "", nil
	}
	confirmed, err := c.st.ConfirmPurge(ctx, m, func(s store.ClaimState) error { return c.recheck(m, s) })
	if errors.Is(err, store.ErrClaimReleased) {
		if m.RunID == c.runID {
			c.note(m.Kind, m.ID, m.ThreadID, causeOf(m), -1)
		}
		return m, reasonOf(err), nil
	}
	if err != nil {
		return m, "", fmt.Errorf("confirm purge: %w", err)
	}
	return confirmed, "", nil
}

// reasonOf is the reason a re-check gave a claim back.
func reasonOf(err error) string {
	var why givenBack
	if errors.As(err, &why) {
		return string(why)
	}
	return err.Error()
}

// givenBack is why a re-check gives a claim back: the audit reason.
type givenBack string

func (g givenBack) Error() string { return string(g) }

// recheck decides whether claim m still stands under the thread's hold and
// override as they are now (s): a hold wins; an override, or a policy
// changed since an earlier run's claim, wins when the item is no longer
// due under it.
func (c *claims) recheck(m store.PurgeMarker, s store.ClaimState) error {
	if m.Replayed {
		return nil // the purge happened: the trail says so (replay.go)
	}
	if s.LegalHold {
		return givenBack(reasonLegalHold)
	}
	if s.OverrideErr != nil {
		return givenBack("malformed retention override: " + s.OverrideErr.Error())
	}
	now := c.policy.global.with(s.Override)
	if m.RunID == c.runID && now == c.policy.of(m.ThreadID) {
		return nil // what the claim was made under
	}
	switch cause := causeOf(m); {
	case cause == audit.CauseDeleted:
		period := now.period
		if m.Kind == store.KindMessage {
			period = now.messagePeriod
		}
		if due := unixTime(m.DeletedTS).Add(period); due.After(c.at) {
			return givenBack(reasonOverride + "not due before " + due.Format(time.RFC3339) +
				" (period " + config.FormatDuration(period) + ")")
		}
	case cause == audit.CauseMaxAge:
		if now.maxAge <= 0 {
			return givenBack(reasonOverride + "max_age is off")
		}
		created, err := s.Created()
		if err != nil {
			return givenBack(reasonOverride + "creation time unreadable: " + err.Error())
		}
		if created >= c.at.Add(-now.maxAge).UnixNano() {
			return givenBack(reasonOverride + "younger than max_age " + config.FormatDuration(now.maxAge))
		}
	case cause == audit.CauseMaxMessages:
		// The live count leaves out claimed messages: the claim stands
		// while the thread keeps at least its cap without this message.
		if now.maxMessages <= 0 {
			return givenBack(reasonOverride + "max_messages is off")
		}
		live, err := s.LiveCount()
		if err != nil {
			return givenBack(reasonOverride + "live count unreadable: " + err.Error())
		}
		if live < int64(now.maxMessages) {
			return givenBack(fmt.Sprintf("%swithin max_messages %d", reasonOverride, now.maxMessages))
		}
	}
	return nil
}

// causeOf is a marker's cause; markers written before policies have none
// and mean deleted.
func causeOf(m store.PurgeMarker) string {
	if m.Cause == "" {
		return audit.CauseDeleted
	}
	return m.Cause
}
