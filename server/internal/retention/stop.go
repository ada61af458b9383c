package retention

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// stopCause records why a run stopped before the end.
type stopCause struct {
	status string // footer status: failed or interrupted
	reason string
	err    error // for failed runs: what Run returns
}

// stageError is a failure of one stage of a run, for the errors metric.
type stageError struct {
	stage string
	err   error
}

func (e *stageError) Error() string { return e.err.Error() }

func (e *stageError) Unwrap() error { return e.err }

func atStage(stage string, err error) error { return &stageError{stage: stage, err: err} }

// fail stops the run on an error of stage: an audit write error fails it;
// a shutdown, lost lease or pause showing through the error interrupts it;
// anything else fails it. what, when set, says what failed.
func (rn *run) fail(ctx context.Context, stage, what string, err error) {
	var ae *auditError
	if errors.As(err, &ae) {
		if rn.stop == nil {
			rn.r.metrics.countError(stageAudit)
			rn.r.log.Error("retention_audit_write_failed", "run_id", rn.id, "err", ae.err)
		}
		rn.setStop(&stopCause{status: audit.RunFailed, reason: ae.Error(), err: ae})
		return
	}
	if isStop(err) || ctx.Err() != nil {
		rn.halt(err)
		return
	}
	var se *stageError
	if errors.As(err, &se) {
		stage = se.stage
	}
	rn.r.metrics.countError(stage)
	rn.r.log.Error("retention_run_error", "run_id", rn.id, "stage", stage, "err", err)
	if what != "" {
		err = fmt.Errorf("%s: %w", what, err)
	}
	rn.setStop(&stopCause{status: audit.RunFailed, reason: err.Error(), err: err})
}

// halt stops the run for a shutdown, a lost lease or a pause.
func (rn *run) halt(err error) {
	reason := reasonShutdown + err.Error()
	if errors.Is(err, ErrPaused) {
		reason = reasonPaused
		rn.r.log.Warn("retention_run_paused", "run_id", rn.id)
	} else if errors.Is(err, ErrLeaseLost) || errors.Is(err, store.ErrFenced) {
		reason = err.Error()
		if !strings.HasPrefix(reason, reasonLeaseLost) {
			reason = reasonLeaseLost + reason
		}
		rn.r.log.Warn("retention_lease_lost", "run_id", rn.id, "err", err)
		if errors.Is(err, store.ErrFenced) && rn.r.onFenced != nil {
			rn.r.onFenced(err)
		}
	}
	rn.setStop(&stopCause{status: audit.RunInterrupted, reason: reason})
}

// setStop records why the run stops; the first cause wins.
func (rn *run) setStop(c *stopCause) {
	if rn.stop == nil {
		rn.stop = c
	}
}

// isStop tells a requested stop (shutdown, lost lease, pause, or writes
// refused because a newer owner has written: a lost lease seen by the store)
// from a failure.
func isStop(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrPaused) || errors.Is(err, store.ErrFenced)
}
