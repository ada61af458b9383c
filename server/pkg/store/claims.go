package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// A purge claim (its marker) goes through two states. Claimed: the item is
// taken by a run, but nothing of it is deleted or exported yet, so a legal
// hold or an override of its thread may still win; the run re-checks the
// claim before anything irreversible (ConfirmPurge) and gives it back if
// they do. Confirmed: the re-check passed and deletes may begin; from then
// on a hold or override of the thread answers ErrPurgeInProgress, because
// the item can no longer be given back whole. A thread's own claim refuses
// holds and overrides from the start (restore rules, spec §3), so it is
// re-checked when it is made (BeginPurgeChecked) and needs no confirmation.

// ErrClaimReleased is returned when a re-check gave a claim back (or, for a
// thread, refused it): no marker is left and nothing was deleted. It wraps
// the re-check's reason.
var ErrClaimReleased = errors.New("claim given back")

// ClaimState is what a claim is re-checked against, read under the
// thread's lock: the thread's hold and override as they are now. What only
// some re-checks need is read on demand, under the same lock.
type ClaimState struct {
	ThreadFound bool
	LegalHold   bool
	Override    RetentionOverride
	HasOverride bool
	OverrideErr error // the override cannot be read (wraps ErrMalformed)

	s *Store
	m PurgeMarker
}

// Created is the claimed message's creation time (its first version's).
func (c ClaimState) Created() (int64, error) { return c.s.createdTS(c.m.ID) }

// LiveCount is the thread's live count, which leaves out the messages
// claimed by policies.
func (c ClaimState) LiveCount() (int64, error) { return liveCount(c.s.db, c.m.ThreadID) }

// ConfirmPurge re-checks a claim under its thread's lock. keep returns nil
// when the item may still be purged, or the reason it may not. On nil the
// marker is confirmed and returned; otherwise the claim is given back (the
// marker removed, a policy claim's message counted live again) and the
// error wraps ErrClaimReleased and keep's reason. A marker confirmed
// earlier (a resumed purge) is not re-checked: nothing could change since.
func (s *Store) ConfirmPurge(ctx context.Context, m PurgeMarker, keep func(ClaimState) error) (PurgeMarker, error) {
	if err := ctx.Err(); err != nil {
		return m, err
	}
	if err := checkKind(m.Kind); err != nil {
		return m, err
	}
	if err := validateIDs(m.ID, m.ThreadID); err != nil {
		return m, err
	}
	h := s.hold(m.ThreadID)
	defer h.release()

	stored, err := s.readMarker(m.Kind, m.ID)
	if err != nil {
		return m, fmt.Errorf("confirm purge of %s %s: %w", m.Kind, m.ID, err)
	}
	if stored.Confirmed {
		return stored, nil
	}
	st, err := s.claimState(m)
	if err != nil {
		return m, fmt.Errorf("confirm purge of %s %s: %w", m.Kind, m.ID, err)
	}
	if why := keep(st); why != nil {
		if err := s.releaseClaim(ctx, h, m); err != nil {
			return m, fmt.Errorf("give back purge claim of %s %s: %w", m.Kind, m.ID, err)
		}
		return m, fmt.Errorf("%w: %w", ErrClaimReleased, why)
	}
	m.Confirmed = true
	v, err := encode(m)
	if err != nil {
		return m, err
	}
	// Not synced on its own: the deletes that follow are later in the log.
	if err := s.setUnder(ctx, h, purgeKey(m.Kind, m.ID), v, false); err != nil {
		return m, fmt.Errorf("confirm purge of %s %s: %w", m.Kind, m.ID, err)
	}
	return m, nil
}

// readMarker reads an item's purge marker; ErrNotFound when there is none.
func (s *Store) readMarker(kind ItemKind, id string) (PurgeMarker, error) {
	v, err := s.get(purgeKey(kind, id))
	if err != nil {
		return PurgeMarker{}, err
	}
	var m PurgeMarker
	if err := json.Unmarshal(v, &m); err != nil {
		return PurgeMarker{}, fmt.Errorf("purge marker of %s: %w: %w", id, ErrMalformed, err)
	}
	return m, nil
}

// claimState reads what a claim is re-checked against; the caller holds
// the thread's lock.
func (s *Store) claimState(m PurgeMarker) (ClaimState, error) {
	st := ClaimState{s: s, m: m}
	t, err := s.readThread(m.ThreadID)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil && !errors.Is(err, ErrMalformed):
		return st, err
	case err == nil:
		st.ThreadFound, st.LegalHold = true, t.LegalHold
	}
	st.Override, st.HasOverride, st.OverrideErr = s.readOverride(m.ThreadID)
	if st.OverrideErr != nil && !errors.Is(st.OverrideErr, ErrMalformed) {
		return st, st.OverrideErr
	}
	return st, nil
}

// releaseClaim removes a claim nothing was deleted under, in one batch:
// the marker and, for a policy claim, the live-index change its claim made.
// The caller holds h, the thread's stripe.
func (s *Store) releaseClaim(ctx context.Context, h *held, m PurgeMarker) error {
	b := s.db.NewBatch()
	_ = b.Delete(purgeKey(m.Kind, m.ID), nil)
	live, err := s.liveClaim(m)
	if err != nil && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrNotFound) {
		_ = b.Close()
		return err
	}
	if live {
		created, err := s.createdTS(m.ID)
		if err != nil && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrNotFound) {
			_ = b.Close()
			return err
		}
		if err == nil {
			if err := s.addLive(b, m.ThreadID, m.ID, created, +1); err != nil {
				_ = b.Close()
				return err
			}
		}
	}
	// Not synced: lost in a crash, the claim is back and re-checked again.
	return s.apply(ctx, write{kind: writeState, batch: b, under: h})
}

// refuseConfirmed answers ErrPurgeInProgress when a confirmed claim holds a
// message of thread tid: a hold or override set now could not be honoured
// for it. The caller holds the thread's lock. Claims are few (a run's
// export group and the purge under way), so listing them is cheap.
func (s *Store) refuseConfirmed(ctx context.Context, tid, op string) error {
	ms, err := s.PendingPurges(ctx)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.Kind == KindMessage && m.ThreadID == tid && m.Confirmed {
			return fmt.Errorf("%s %s: %w: message %s is being purged by run %s; retry once it has finished",
				op, tid, ErrPurgeInProgress, m.ID, m.RunID)
		}
	}
	return nil
}
