package retention

import (
	"context"
	"fmt"

	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// ErrPaused: a non-dry run was asked for while retention is paused (spec
// §3.2). A run already going stops at its next batch boundary with it.
var ErrPaused = errorString("retention is paused")

// reasonPaused is the footer reason of a run stopped by a pause.
const reasonPaused = "paused"

// PauseState is the pause switch as the API and CLI show it.
type PauseState struct {
	Paused   bool      `json:"paused"`
	Reason   string    `json:"paused_reason"`
	PausedAt wire.Time `json:"paused_at"` // null unless paused
}

// PauseStateOf shows a stored pause switch.
func PauseStateOf(p store.RetentionPause) PauseState {
	st := PauseState{Paused: p.Paused, Reason: p.Reason}
	if p.Paused {
		st.PausedAt = wire.Nanos(p.PausedAt)
	}
	return st
}

// Pause reads the pause switch from the database and refreshes the gauge.
func (r *Runner) Pause(ctx context.Context) (PauseState, error) {
	p, err := r.st.RetentionPause(ctx)
	if err != nil {
		return PauseState{}, fmt.Errorf("retention pause: %w", err)
	}
	r.setPausedGauge(p.Paused)
	return PauseStateOf(p), nil
}

// SetPause pauses or resumes retention. The switch is stored in the
// database, so it survives restarts; a run going stops at its next batch
// boundary (checkpoint reads the switch).
func (r *Runner) SetPause(ctx context.Context, paused bool, reason string) (PauseState, error) {
	p, err := r.st.SetRetentionPause(ctx, paused, reason)
	if err != nil {
		return PauseState{}, fmt.Errorf("retention pause: %w", err)
	}
	r.setPausedGauge(p.Paused)
	if paused {
		r.log.Warn("retention_paused", "reason", reason)
	} else {
		r.log.Info("retention_resumed")
	}
	return PauseStateOf(p), nil
}

func (r *Runner) setPausedGauge(paused bool) {
	v := 0.0
	if paused {
		v = 1
	}
	r.metrics.Paused.Set(v)
}

// paused reports whether the switch is on. A switch that cannot be read
// counts as on (the store says so), so a broken record stops deletes.
func (r *Runner) paused(ctx context.Context) (bool, error) {
	p, err := r.st.RetentionPause(ctx)
	r.setPausedGauge(p.Paused)
	return p.Paused, err
}
