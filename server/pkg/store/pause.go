package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// pauseKey holds the retention pause switch (spec §3.2). It lives in the
// database, not in the configuration, so it survives restarts and every
// process that opens the database sees it.
const pauseKey = "sys:retention:pause"

// RetentionPause is the stored pause switch. The zero value is "not paused".
type RetentionPause struct {
	Paused   bool   `json:"paused"`
	Reason   string `json:"reason,omitempty"`
	PausedAt int64  `json:"paused_at,omitempty"` // Unix ns, UTC; 0 when not paused
}

// MaxPauseReason bounds the operator's note so the record stays small.
const MaxPauseReason = 1024

// RetentionPause returns the pause switch; a database that never had one
// is not paused. An unreadable record counts as paused: a switch whose
// state cannot be told must not let deletes through.
func (s *Store) RetentionPause(ctx context.Context) (RetentionPause, error) {
	if err := ctx.Err(); err != nil {
		return RetentionPause{}, err
	}
	v, err := s.get([]byte(pauseKey))
	switch {
	case errors.Is(err, ErrNotFound):
		return RetentionPause{}, nil
	case err != nil:
		return RetentionPause{Paused: true}, fmt.Errorf("read retention pause: %w", err)
	}
	var p RetentionPause
	if err := json.Unmarshal(v, &p); err != nil {
		return RetentionPause{Paused: true}, fmt.Errorf("read retention pause: %w: %w", ErrMalformed, err)
	}
	return p, nil
}

// SetRetentionPause stores the pause switch durably and returns it as
// stored. Pausing keeps the reason and sets paused_at to now (a repeated
// pause keeps the first paused_at); resuming clears both.
func (s *Store) SetRetentionPause(ctx context.Context, paused bool, reason string) (RetentionPause, error) {
	if err := ctx.Err(); err != nil {
		return RetentionPause{}, err
	}
	if len(reason) > MaxPauseReason {
		return RetentionPause{}, fmt.Errorf("%w: pause reason is %d bytes, longer than %d", ErrInvalidArgument, len(reason), MaxPauseReason)
	}
	// Two switches at once must not interleave the read of paused_at.
	h := s.hold(pauseKey)
	defer h.release()
	cur, err := s.RetentionPause(ctx)
	if err != nil && !errors.Is(err, ErrMalformed) {
		return RetentionPause{}, err
	}
	next := RetentionPause{}
	if paused {
		next = RetentionPause{Paused: true, Reason: reason, PausedAt: s.now().UnixNano()}
		if cur.Paused && cur.PausedAt > 0 {
			next.PausedAt = cur.PausedAt
		}
	}
	v, err := encode(next)
	if err != nil {
		return RetentionPause{}, err
	}
	b := s.db.NewBatch()
	_ = b.Set([]byte(pauseKey), v, nil)
	if err := s.apply(ctx, write{kind: writePause, batch: b, sync: true, under: h}); err != nil {
		return RetentionPause{}, fmt.Errorf("write retention pause: %w", err)
	}
	return next, nil
}
