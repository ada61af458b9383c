package store

import (
	"context"
	"encoding/json"
	"fmt"
)

// Subject erasure (spec §12, docs/sealed-content-design.md §7): the
// messages of an author whose keys are being destroyed are purged with
// cause "subject", live or soft-deleted, in a thread deleted or not; only
// a legal hold keeps them. The erasure's status is kept in the database
// (sys:erasure:<id>); the author never is.

// CauseSubject is the purge cause of a subject erasure.
const CauseSubject = "subject"

const erasureNS = "sys:erasure:"

func erasureKey(id string) []byte { return []byte(erasureNS + id) }

// BeginSubjectPurge claims message m.ID of thread m.ThreadID for subject
// erasure m.ErasureID (m.Cause must be CauseSubject). Under the thread's
// lock it re-checks that the thread exists and is not on legal hold (the
// error then wraps ErrLegalHold too) and that the message exists there
// and is not claimed already; then, in one batch, it writes the marker
// (with the message's number of versions) and, for a live message, takes
// it out of the live indexes as a policy claim does. ErrNotEligible
// otherwise. Like every claim, the message's changes answer
// ErrPurgeInProgress from then on. It returns the marker written.
func (s *Store) BeginSubjectPurge(ctx context.Context, m PurgeMarker) (PurgeMarker, error) {
	if err := ctx.Err(); err != nil {
		return m, err
	}
	if m.Kind != KindMessage || m.Cause != CauseSubject || m.ErasureID == "" {
		return m, fmt.Errorf("%w: a subject purge claims a message for an erasure, not %s for %q", ErrInvalidArgument, m.Kind, m.Cause)
	}
	if err := validateIDs(m.ID, m.ThreadID); err != nil {
		return m, err
	}
	h := s.hold(m.ThreadID)
	defer h.release()

	t, err := s.readThread(m.ThreadID)
	switch {
	case err != nil:
		return m, fmt.Errorf("begin subject purge of message %s: %w: thread: %w", m.ID, ErrNotEligible, err)
	case t.LegalHold:
		return m, fmt.Errorf("begin subject purge of message %s: %w: %w", m.ID, ErrNotEligible, ErrLegalHold)
	}
	msg, err := s.readMessage(m.ThreadID, m.ID)
	if err != nil {
		return m, fmt.Errorf("begin subject purge of message %s: %w: %w", m.ID, ErrNotEligible, err)
	}
	if claimed, err := s.purgeStarted(KindMessage, m.ID); err != nil {
		return m, err
	} else if claimed {
		return m, fmt.Errorf("begin subject purge of message %s: %w: already claimed", m.ID, ErrNotEligible)
	}
	m, err = s.writeClaim(ctx, h, m, msg, !msg.Deleted)
	if err != nil {
		return m, fmt.Errorf("begin subject purge of message %s: %w", m.ID, err)
	}
	return m, nil
}

// writeClaim writes claim m of message msg, read under its thread's
// stripe, in one batch: the marker (with the message's versions) and,
// when dropLive, the message out of the live indexes. Not synced on its
// own: the group's Sync makes it durable before the erasure destroys the
// key (retention).
func (s *Store) writeClaim(ctx context.Context, h *held, m PurgeMarker, msg Message, dropLive bool) (PurgeMarker, error) {
	m.Versions, m.DeletedTS = msg.Version, msg.DeletedTS
	if m.StartedAt == 0 {
		m.StartedAt = s.now().UnixNano()
	}
	v, err := encode(m)
	if err != nil {
		return m, err
	}
	b := s.db.NewBatch()
	_ = b.Set(purgeKey(KindMessage, m.ID), v, nil)
	if dropLive {
		if err := s.liveChange(b, m.ThreadID, m.ID, -1); err != nil {
			_ = b.Close()
			return m, err
		}
	}
	return m, s.apply(ctx, write{kind: writeState, batch: b, under: h})
}

// KeySealer is the Sealer the store was opened with (nil: plain), for
// what works on the keys beside the store: retention's subject erasures.
func (s *Store) KeySealer() Sealer { return s.sealer }

// liveClaim reports whether claim m took a live message out of the live
// indexes: a policy claim always, a subject claim when the message was
// live (it cannot change while claimed).
func (s *Store) liveClaim(m PurgeMarker) (bool, error) {
	if m.Kind != KindMessage {
		return false, nil
	}
	if policyCause(m.Cause) {
		return true, nil
	}
	if m.Cause != CauseSubject {
		return false, nil
	}
	msg, err := s.readMessage(m.ThreadID, m.ID)
	if err != nil {
		return false, err
	}
	return !msg.Deleted, nil
}

// Erasure is the stored status of a subject erasure: what GET
// /admin/erasures/{id} reports, and what a resumed erasure needs (the
// keys it set out to destroy). Never the author: Subject is an HMAC.
type Erasure struct {
	ID             string   `json:"erasure_id"`
	Status         string   `json:"status"`
	Subject        string   `json:"subject"`
	RequestedAt    int64    `json:"requested_at"`
	CompletedAt    int64    `json:"completed_at,omitempty"`
	KeysDestroyed  int64    `json:"keys_destroyed"`
	VersionsPurged int64    `json:"versions_purged"`
	MessagesPurged int64    `json:"messages_purged"`
	HeldThreads    []string `json:"held_threads"`
	RunIDs         []string `json:"run_ids"`
	Error          string   `json:"error,omitempty"`
	// Destroying lists the threads whose key of the author a run was
	// about to destroy, written before it did: a run killed in between
	// counts those that are gone when it resumes.
	Destroying []string `json:"destroying,omitempty"`
}

// PutErasure writes an erasure's status, synced.
func (s *Store) PutErasure(ctx context.Context, e Erasure) error {
	if err := ValidateID(e.ID); err != nil {
		return err
	}
	v, err := encode(e)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	_ = b.Set(erasureKey(e.ID), v, nil)
	// The request's answer, when it carries an idempotency key (SetAnswer).
	if err := s.apply(ctx, write{kind: writeState, batch: b, sync: true, answer: answer{inline: true}}); err != nil {
		return fmt.Errorf("write erasure %s: %w", e.ID, err)
	}
	return nil
}

// GetErasure reads an erasure's status; ErrNotFound when there is none.
func (s *Store) GetErasure(ctx context.Context, id string) (Erasure, error) {
	var e Erasure
	if err := ctx.Err(); err != nil {
		return e, err
	}
	if err := ValidateID(id); err != nil {
		return e, err
	}
	v, err := s.get(erasureKey(id))
	if err != nil {
		return e, fmt.Errorf("erasure %s: %w", id, err)
	}
	if err := json.Unmarshal(v, &e); err != nil {
		return e, fmt.Errorf("erasure %s: %w: %w", id, ErrMalformed, err)
	}
	return e, nil
}
