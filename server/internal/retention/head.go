package retention

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
				head, _, _, herr := r.settle(ctx)
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
		if err := sleep(ctx, SystemClock{}, holdRetry); err != nil {
			return audit.Head{}, nil, err
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
	// Its identity starts here too: the runs of databases sharing the
	// trail are then told from its own.
	if _, err := r.st.DatabaseID(ctx, true); err != nil {
		return audit.Head{}, err
	}
	if err := r.st.SetAuditHead(ctx, store.AuditHead(cur)); err != nil {
		return audit.Head{}, err
	}
	r.log.Info("retention_audit_head_adopted", "run_id", cur.RunID, "file", cur.File)
	return cur, nil
}

// advanceHead records a run's sealed file as the database's head when
// the database reflects every purge before it (settle), or when the run
// is a completed replay of what it lacked. A run over a database that is
// behind its trail (copied back by hand and not yet replayed) leaves the
// head before the purges it lacks, so they stay due for replay. Dry runs
// write nothing to the database.
func (r *Runner) advanceHead(ctx context.Context, runID string, w *audit.Writer, path string, dry, replayed bool) {
	if dry {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if !replayed {
		if _, lacks, whole, err := r.settle(ctx, runID); err != nil || lacks > 0 || !whole {
			r.log.Warn("retention_audit_head_behind", "run_id", runID, "purges_lacking", lacks, "trail_whole", whole, "err", err)
		}
		return
	}
	h := audit.HeadOf(r.cfg.AuditPath, path, runID, w.LastHash())
	if err := r.st.SetAuditHead(ctx, store.AuditHead(h)); err != nil {
		// The next start replays this run's purges over the database
		// again: they are absent, recorded skipped. Nothing is lost.
		r.metrics.countError(stageAudit)
		r.log.Warn("retention_audit_head_not_recorded", "run_id", runID, "err", err)
	}
}

// settle moves the database's head along the chain of files after it as
// far as the database lacks nothing: over runs of other databases sharing
// the trail, runs that purged nothing, replays (their items were recorded
// purged before them), the last run that began purging this database (its
// purges are here as far as they went; its markers finish the rest) and
// the runs in also. It stops at the first file whose purges the database
// lacks and returns how many purges the files from there on record, and
// whether the trail after the head is whole.
func (r *Runner) settle(ctx context.Context, also ...string) (head audit.Head, lacks int64, whole bool, err error) {
	if head, err = r.head(ctx); err != nil {
		return head, 0, false, err
	}
	id, err := r.identity(ctx)
	if err != nil {
		return head, 0, false, err
	}
	started, err := r.st.RunStarted(ctx)
	if err != nil {
		return head, 0, false, err
	}
	steps, whole, err := audit.Steps(r.cfg.AuditPath, head)
	if err != nil {
		return head, 0, false, err
	}
	ours := func(runID string) bool { return runID == started || slices.Contains(also, runID) }
	moved := head
	behind := false
	for _, st := range steps {
		n := lacking(st, id)
		if !behind && (n == 0 || ours(st.Head.RunID)) {
			moved = st.Head
			continue
		}
		behind = true
		switch {
		case ours(st.Head.RunID):
		case n < 0:
			lacks++ // unknown: at least one, so that a replay reads it
		default:
			lacks += n
		}
	}
	if moved != head {
		if err := r.st.SetAuditHead(ctx, store.AuditHead(moved)); err != nil {
			return head, lacks, whole, err
		}
		head = moved
	}
	return head, lacks, whole, nil
}

// lacking is how many purges a file records that a database with identity
// id lacks if it is behind it: none for replays and other databases' runs;
// -1 for a file whose footer cannot be read (counted as lacking, unknown).
func lacking(st audit.Step, id identity) int64 {
	h := st.Header
	switch {
	case h == nil:
		return -1
	case replayOrOther(h, id):
		return 0
	}
	return st.Purged
}

// replayOrOther reports whether the file with header h records no purge a
// database with identity id lacks: a replay (its items were recorded
// purged before it) or a run of a database outside its lineage sharing
// the trail (a copy restored from it, say, spec §10.1).
func replayOrOther(h *audit.Header, id identity) bool {
	return audit.IsReplay(h) || !id.lineal(h)
}

// identity is a database's own identity and the identities it descends
// from (a restored copy's origin, the origin's origin, …).
type identity struct {
	id        string
	ancestors []string
	// anyOrigin: a copy of a database that had no identity yet (a backup
	// from before identities). Its origin's runs since carry an identity
	// the copy cannot know, so every run but its own is taken as lineal:
	// replaying another copy's purges is the lesser harm than bringing
	// purged content back.
	anyOrigin bool
}

// identity reads the database's identity and lineage.
func (r *Runner) identity(ctx context.Context) (identity, error) {
	id, err := r.st.DatabaseID(ctx, false)
	if err != nil {
		return identity{}, err
	}
	l, copied, err := r.st.Lineage(ctx)
	if err != nil {
		return identity{}, err
	}
	return identity{id: id, ancestors: l.Ancestors, anyOrigin: copied && l.OriginID == ""}, nil
}

// lineal reports whether the run with header h purged this database or
// one it descends from: a copy lacks its origin's purges recorded after
// the backup's head, never those of a copy made from it. A file or a
// database from before identities is taken as lineal.
func (id identity) lineal(h *audit.Header) bool {
	return h.DatabaseID == "" || id.id == "" || h.DatabaseID == id.id || id.anyOrigin || slices.Contains(id.ancestors, h.DatabaseID)
}
