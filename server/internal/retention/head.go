package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// The database remembers the last audit run whose purges it reflects (its
// head, spec §10): every run records its sealed file there. A backup
// carries the head with the data, so a restored database, or one copied
// back by hand, knows which purges of the trail it lacks (replay.go).

// holdRetry spaces the attempts of Hold to take the lease.
const holdRetry = 200 * time.Millisecond

// Hold waits until no run is going (in this process or, through the
// lease, any other that shares it) and keeps runs from starting until
// release is called: a backup's checkpoint is taken in between, so it
// reflects exactly the runs up to the database's head. It returns the
// head (Head). ctx bounds the wait.
func (r *Runner) Hold(ctx context.Context) (audit.Head, func(), error) {
	for {
		select {
		case r.slot <- struct{}{}:
			lease, err := r.coord.Acquire(ctx)
			if err == nil {
				head, herr := r.head(ctx)
				if herr != nil {
					_ = lease.Release()
					<-r.slot
					return audit.Head{}, nil, herr
				}
				return head, func() {
					if err := lease.Release(); err != nil {
						r.log.Warn("retention_lease_release_failed", "err", err)
					}
					<-r.slot
				}, nil
			}
			<-r.slot
			if !errors.Is(err, ErrLeaseHeld) {
				return audit.Head{}, nil, fmt.Errorf("acquire lease: %w", err)
			}
		default:
		}
		// Real time, not r.clock: a test's fake clock would never end it.
		t := time.NewTimer(holdRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return audit.Head{}, nil, ctx.Err()
		case <-t.C:
		}
	}
}

// head returns the database's head. A database that records none (written
// before heads existed) adopts the trail's newest sealed file: it has
// been served all along, so it reflects every run of its trail. The
// caller holds the lease.
func (r *Runner) head(ctx context.Context) (audit.Head, error) {
	h, ok, err := r.st.AuditHead(ctx)
	if err != nil {
		return audit.Head{}, err
	}
	if ok {
		return audit.Head(h), nil
	}
	cur, err := audit.CurrentHead(r.cfg.AuditPath)
	if err != nil {
		return audit.Head{}, fmt.Errorf("read the audit trail's head: %w", err)
	}
	if err := r.st.SetAuditHead(ctx, store.AuditHead(cur)); err != nil {
		return audit.Head{}, err
	}
	r.log.Info("retention_audit_head_adopted", "run_id", cur.RunID, "file", cur.File)
	return cur, nil
}

// advanceHead makes a run's sealed file the database's head when the
// database reflects every purge before it: no file between its head and
// this run's recorded a purge (dry runs, runs that found nothing due and
// replays of other copies record none the database lacks), or the run is
// a completed replay of what it lacked. A run over a database that is
// behind its trail (copied back by hand and not yet replayed) leaves the
// head where it is, so the purges it lacks stay due for replay. Dry runs
// write nothing to the database.
func (r *Runner) advanceHead(ctx context.Context, runID string, w *audit.Writer, path string, dry, replayed bool) {
	if dry {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if !replayed {
		cur, err := r.head(ctx)
		if err != nil {
			r.metrics.countError(stageAudit)
			r.log.Warn("retention_audit_head_unreadable", "run_id", runID, "err", err)
			return
		}
		lacks, whole, err := audit.Pending(r.cfg.AuditPath, cur, runID)
		if err != nil || !whole || lacks > 0 {
			r.log.Warn("retention_audit_head_behind", "run_id", runID, "head", cur.RunID, "purges_lacking", lacks,
				"trail_whole", whole, "err", err)
			return
		}
	}
	h := audit.HeadOf(r.cfg.AuditPath, path, runID, w.LastHash())
	if err := r.st.SetAuditHead(ctx, store.AuditHead(h)); err != nil {
		// The next start replays this run's purges over the database
		// again: they are absent, recorded skipped. Nothing is lost.
		r.metrics.countError(stageAudit)
		r.log.Warn("retention_audit_head_not_recorded", "run_id", runID, "err", err)
	}
}
