package retention

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/erase"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// journal is the run's audit trail: the audit writer, the group of
// finished purges waiting for their durable write, and the one tally the
// footer and the Result are both made from (the writer counts the records;
// the journal adds what is not a record: entries scanned, counts by cause).
type journal struct {
	st      *store.Store
	keys    *keystore.KeyStore // sealing's key store; nil: plain
	log     *slog.Logger
	metrics *Metrics
	w       *audit.Writer // nil until the header is written

	group     []finishedPurge // purged or stamped, record not yet durable
	groupKeys int
	flushKeys int // a group is written once it holds this many keys

	err     error // the first audit write error: nothing more is written or deleted
	scanned int64
	byCause map[string]CauseCounts
	// erased counts the purged records of each subject erasure.
	erased map[string]erasedCount
}

// finishedPurge is a purged (or stamped) item whose audit record waits for
// the next durable group write; its marker goes once the record is synced.
type finishedPurge struct {
	marker store.PurgeMarker
	stamp  *store.StampMarker // set for a stamp instead of a purge
	item   audit.Item
}

// auditError is a failed audit write: the run fails and deletes nothing more.
type auditError struct{ err error }

func (e *auditError) Error() string { return "audit write: " + e.err.Error() }
func (e *auditError) Unwrap() error { return e.err }

// record appends an item record and counts it.
func (j *journal) record(it audit.Item) error {
	if j.err != nil {
		return &auditError{j.err}
	}
	if err := j.w.Item(it); err != nil {
		j.err = err
		return &auditError{err}
	}
	if it.Cause == "" {
		it.Cause = audit.CauseDeleted // as the writer wrote it
	}
	cc := j.byCause[it.Cause]
	switch it.Status {
	case audit.StatusPurged:
		cc.Purged++
		cc.Eligible++
		if it.ErasureID != "" {
			if j.erased == nil {
				j.erased = make(map[string]erasedCount)
			}
			c := j.erased[it.ErasureID]
			c.messages, c.versions = c.messages+1, c.versions+it.Versions
			j.erased[it.ErasureID] = c
		}
		j.metrics.ItemsPurged.WithLabelValues(it.ItemType, it.Cause).Inc()
		if it.Replayed {
			j.metrics.ReplayedItems.Inc()
		}
	case audit.StatusFailed:
		cc.Failed++
		cc.Eligible++
	case audit.StatusDryRun:
		cc.Eligible++
	case audit.StatusSkipped:
		cc.Skipped++
	}
	if j.byCause == nil {
		j.byCause = make(map[string]CauseCounts)
	}
	j.byCause[it.Cause] = cc
	return nil
}

// add queues a finished purge or stamp; it reports whether the group is
// due for its durable write.
func (j *journal) add(p finishedPurge, keys int) bool {
	j.group = append(j.group, p)
	j.groupKeys += keys
	return len(j.group) >= flushItems || j.groupKeys >= j.flushKeys
}

// flush makes the group durable, in the order that keeps spec §5 true
// through a crash at any instant: deletes synced before any "purged"
// record is written, records synced before any marker is cleared. On an
// error the markers stay: the next run writes the records.
func (j *journal) flush(ctx context.Context) error {
	if len(j.group) == 0 || j.err != nil {
		return nil
	}
	// Once deletes have happened their records are owed, shutdown or not.
	ctx = context.WithoutCancel(ctx)
	if err := j.st.Sync(ctx); err != nil {
		return atStage(stageSync, fmt.Errorf("sync store: %w", err))
	}
	// A "shredded" record says the thread's keys are in no file of the
	// key store: its erase step runs first, once for the group (design
	// §6 step 4). A failure leaves the markers: the next run erases.
	if err := j.eraseKeys(ctx); err != nil {
		return atStage(stageErase, err)
	}
	markers := make([]store.PurgeMarker, 0, len(j.group))
	var stamps []store.StampMarker
	for _, p := range j.group {
		if err := j.record(p.item); err != nil {
			return err
		}
		if p.stamp != nil {
			stamps = append(stamps, *p.stamp)
		} else {
			markers = append(markers, p.marker)
		}
	}
	if err := j.w.Sync(); err != nil {
		j.err = err
		return &auditError{err}
	}
	if err := j.st.ClearPurges(ctx, markers); err != nil {
		return atStage(stageSync, fmt.Errorf("clear purge markers: %w", err))
	}
	if err := j.st.ClearStamps(ctx, stamps); err != nil {
		return atStage(stageSync, fmt.Errorf("clear stamp markers: %w", err))
	}
	j.group = j.group[:0]
	j.groupKeys = 0
	return nil
}

// tally is the run's counts so far, as the footer carries them.
func (j *journal) tally() audit.Footer {
	var f audit.Footer
	if j.w != nil {
		f = j.w.Counts()
	}
	f.Scanned = j.scanned
	return f
}

// eraseKeys runs the key store's erase step when the group holds a
// shredded item.
func (j *journal) eraseKeys(ctx context.Context) error {
	if j.keys == nil {
		return nil
	}
	shredded := false
	for _, p := range j.group {
		shredded = shredded || p.item.Shredded
	}
	if !shredded {
		return nil
	}
	start := time.Now()
	res, err := j.keys.Erase(ctx, erase.Options{})
	if err != nil {
		return fmt.Errorf("erase destroyed keys from the key store: %w", err)
	}
	j.log.Debug("retention_keystore_erased", "full", res.Full, "nothing", res.Nothing,
		"erase_ms", time.Since(start).Milliseconds())
	return nil
}

// keystoreErased is the footer's keystore_erased: a sealing server's key
// store holds no destroyed key in its files. False without sealing.
func (j *journal) keystoreErased(ctx context.Context) bool {
	if j.keys == nil {
		return false
	}
	erased, err := j.keys.Erased(context.WithoutCancel(ctx))
	return err == nil && erased
}
