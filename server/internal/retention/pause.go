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

// PauseSwitch is where the pause switch lives: the database on a single
// node (the default), one record in etcd for every shard of a cluster
// (spec §11: pause is cluster-wide). Get answers paused, with the error,
// when the switch cannot be read: a switch whose state cannot be told must
// not let deletes through. Set keeps the first paused_at of a repeated
// pause and clears it on resume, as the store does.
type PauseSwitch interface {
	Get(ctx context.Context) (store.RetentionPause, error)
	Set(ctx context.Context, paused bool, reason string) (store.RetentionPause, error)
}

// BatchPauseSwitch is a PauseSwitch with a cheaper read for the checks a
// run going makes at every batch boundary: a switch in etcd answers a
// recent read there instead of asking etcd each time. Get stays the read
// before a run starts and for status.
type BatchPauseSwitch interface {
	PauseSwitch
	GetAtBatch(ctx context.Context) (store.RetentionPause, error)
}

// storePause is the switch in the runner's database.
type storePause struct{ st *store.Store }

func (p storePause) Get(ctx context.Context) (store.RetentionPause, error) {
	return p.st.RetentionPause(ctx)
}

func (p storePause) Set(ctx context.Context, paused bool, reason string) (store.RetentionPause, error) {
	return p.st.SetRetentionPause(ctx, paused, reason)
}

// Pause reads the pause switch and refreshes the gauge.
func (r *Runner) Pause(ctx context.Context) (PauseState, error) {
	p, err := r.pause.Get(ctx)
	if err != nil {
		return PauseState{}, fmt.Errorf("retention pause: %w", err)
	}
	r.setPausedGauge(p.Paused)
	return PauseStateOf(p), nil
}

// SetPause pauses or resumes retention. The switch is stored durably (the
// database, or etcd in a cluster), so it survives restarts; a run going
// stops at its next batch boundary (checkpoint reads the switch).
func (r *Runner) SetPause(ctx context.Context, paused bool, reason string) (PauseState, error) {
	p, err := r.pause.Set(ctx, paused, reason)
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
	return r.pausedBy(ctx, r.pause.Get)
}

// pausedAtBatch is paused for the check at a batch boundary.
func (r *Runner) pausedAtBatch(ctx context.Context) (bool, error) {
	if b, ok := r.pause.(BatchPauseSwitch); ok {
		return r.pausedBy(ctx, b.GetAtBatch)
	}
	return r.paused(ctx)
}

func (r *Runner) pausedBy(ctx context.Context, get func(context.Context) (store.RetentionPause, error)) (bool, error) {
	p, err := get(ctx)
	r.setPausedGauge(p.Paused)
	return p.Paused, err
}
