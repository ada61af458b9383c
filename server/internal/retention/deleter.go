package retention

import (
	"context"
	"fmt"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// deleter does a run's deleting: chunked batches paced against user
// writes, the export queue (export.go) and the spans the erase step makes
// unrecoverable afterwards.
type deleter struct {
	r *Runner
	// check runs before every batch: shutdown, lease, pause (the run's
	// checkpoint); hook is the tests' view of a batch boundary.
	check   func(context.Context) error
	hook    func(ctx context.Context, n int)
	pace    *pacer
	batches int // batch boundaries reached

	exp   *audit.ExportWriter // nil unless exporting (never in a dry run)
	queue []queuedPurge       // confirmed-to-be, export due

	// erase collects the spans this run purged; owed is set once the run
	// has recorded, before its first delete, that an erase is owed;
	// eraseAll when purges before this run's may not have been erased.
	erase          *store.EraseSpans
	owed, eraseAll bool
	// shredded counts the threads whose keys this run destroyed.
	shredded int
}

func newDeleter(r *Runner, check func(context.Context) error, hook func(context.Context, int)) *deleter {
	return &deleter{r: r, check: check, hook: hook, pace: newPacer(r.cfg.BatchPause, r.userWrites()), erase: &store.EraseSpans{}}
}

// purge deletes an item's keys in batches, checking before every batch.
// A sealing server's thread purge destroys the thread's data keys first
// and sets m.Shredded.
func (d *deleter) purge(ctx context.Context, m *store.PurgeMarker) (int, error) {
	st := d.r.st
	if err := d.oweErase(ctx); err != nil {
		return 0, err
	}
	opts := store.PurgeOptions{BatchSize: d.r.cfg.BatchSize, BeforeBatch: d.beforeBatch, BatchLimit: d.pace.batchLimit,
		Erase: d.erase}
	var keys int
	var err error
	if m.Kind == store.KindThread {
		if d.r.keys != nil {
			if err := d.shred(ctx, m); err != nil {
				return 0, err
			}
			opts.Shredded = true
		}
		opts.Marker = *m
		keys, err = st.PurgeThread(ctx, m.ID, opts)
	} else {
		opts.Marker = *m
		keys, err = st.PurgeMessage(ctx, m.ThreadID, m.ID, opts)
	}
	d.r.metrics.KeysDeleted.Add(float64(keys))
	return keys, err
}

// oweErase records, before the run's first purge, that an erase is owed.
func (d *deleter) oweErase(ctx context.Context) error {
	if d.owed {
		return nil
	}
	// Whether earlier purges were all erased is read before this run's
	// first purge says they are not.
	erased, err := d.r.st.Erased(ctx)
	if err != nil {
		return err
	}
	if err := d.r.st.OweErase(ctx); err != nil {
		return err
	}
	d.owed, d.eraseAll = true, !erased
	return nil
}

// shred destroys a sealing server's thread keys before the thread's
// records are deleted (spec §12, design §6): its record is owed first
// (OweShred, synced), then the keys go (synced in the key store). From
// then on the thread's content is unreadable; the records' deletes and
// the key store's erase step (journal.flush) follow, and a run killed
// in between finishes the purge from its marker. A repeated destroy
// (a resumed purge) finds nothing and is harmless.
func (d *deleter) shred(ctx context.Context, m *store.PurgeMarker) error {
	if err := d.check(ctx); err != nil {
		return fmt.Errorf("stopped before destroying keys: %w", err)
	}
	owed, err := d.r.st.OweShred(ctx, *m)
	if err != nil {
		return err
	}
	*m = owed
	d.r.log.Debug("retention_shred_owed", "thread_id", m.ID)
	if h := d.r.hooks.afterOweShred; h != nil {
		h(ctx, *m)
	}
	n, err := d.r.keys.DestroyThread(ctx, m.ID)
	if err != nil {
		return fmt.Errorf("destroy the keys of thread %s: %w", m.ID, err)
	}
	d.shredded++
	d.r.log.Debug("retention_thread_shredded", "thread_id", m.ID, "keys_destroyed", n)
	if h := d.r.hooks.afterShred; h != nil {
		h(ctx, *m)
	}
	return nil
}

// beforeBatch runs before every delete batch: it stops the purge on
// shutdown or when the lease is no longer safely ours, then paces,
// yielding to user writes (pace.go).
func (d *deleter) beforeBatch(ctx context.Context) error {
	d.batches++
	if d.hook != nil {
		d.hook(ctx, d.batches)
	}
	if err := d.check(ctx); err != nil {
		return err
	}
	d.pace.observe(d.r.clock.Now())
	return sleep(ctx, d.r.clock, jitter(d.pace.pause()))
}

// eraseStep makes what was purged unrecoverable from the data directory
// before the footer says so (docs/erasure.md). It runs after non-dry runs
// with ERASE on when this run purged something, or when purges of an
// earlier version or of a run that did not erase may have left content
// (then over the whole key space, once). It reports whether it erased and
// how long it took; the store's errors start with "erase: ". progress is
// told where the erase is.
func (d *deleter) eraseStep(ctx context.Context, runID string, progress func(store.EraseProgress)) (bool, int64, error) {
	r := d.r
	full := d.eraseAll
	if !d.owed {
		erased, err := r.st.Erased(ctx)
		if err != nil {
			return false, 0, err
		}
		if erased {
			return false, 0, nil // nothing purged, nothing left over
		}
		full = true
	}
	start := time.Now()
	er, err := r.st.Erase(ctx, d.erase, store.EraseOptions{Rate: int64(r.cfg.EraseRate) << 20, Full: full,
		Progress: progress})
	took := time.Since(start)
	r.metrics.EraseDuration.Observe(took.Seconds())
	if err != nil {
		return false, took.Milliseconds(), err
	}
	if er.Full {
		r.log.Info("retention_erase_full", "run_id", runID,
			"why", "content purged before erasure existed, or by a run that did not erase, may remain: whole key space erased once",
			"tables_removed", er.TablesRemoved, "logs_removed", er.LogsRemoved, "erase_ms", took.Milliseconds())
	} else {
		r.log.Info("retention_erased", "run_id", runID, "ranges", er.Ranges,
			"tables_removed", er.TablesRemoved, "logs_removed", er.LogsRemoved, "erase_ms", took.Milliseconds())
	}
	return true, took.Milliseconds(), nil
}
