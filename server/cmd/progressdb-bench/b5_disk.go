package main

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// B5: disk space. Live sstable bytes before a purge, after it, and after
// compacting the purged spans, against an identical database seeded
// without the purged threads.

func runB5(ctx context.Context, b *bench) (*section, error) {
	sec := &section{}
	e := b.scaled(1000, 4)
	const m, v = 200, 3
	ps := threadsOf("b5", 0, 2*e, m, v, 2)
	sec.setup = append(sec.setup,
		fmt.Sprintf("%d eligible and %d live threads of %d messages with %d versions, interleaved, flushed and fully compacted. "+
			"Size is Pebble's live sstable and blob-file bytes (`Metrics().Table.Local.LiveSize` + "+
			"`BlobFiles.Local.LiveSize`; WAL excluded). The purged data's size is the full database's size "+
			"minus the size of an identical database seeded without the eligible threads (same IDs and "+
			"contents for the live ones). Steps: before; after a run with production defaults, a flush and "+
			"Pebble's own compactions settling; after `DB().Compact` over the purged spans (from the first to "+
			"the last purged key in each of `thread:`, `version:msg:` and `idx:del:`; with interleaved IDs "+
			"these spans cover most of the keyspace).", e, e, m, v))

	full, err := openSeeded(b.dir("b5"))
	if err != nil {
		return sec, err
	}
	defer full.close()
	if _, err := newGenerator("b5", time.Now()).seed(ctx, b, full.st, "B5: seeding", ps, false); err != nil {
		return sec, err
	}
	if err := full.settle(ctx); err != nil {
		return sec, err
	}
	liveOnly, err := openSeeded(b.dir("b5-live"))
	if err != nil {
		return sec, err
	}
	if _, err := newGenerator("b5", time.Now()).seed(ctx, b, liveOnly.st, "B5: seeding live only", ps, true); err != nil {
		liveOnly.close()
		return sec, err
	}
	if err := liveOnly.settle(ctx); err != nil {
		liveOnly.close()
		return sec, err
	}
	liveSize := float64(liveBytes(liveOnly.db()))
	if err := liveOnly.close(); err != nil {
		return sec, err
	}

	reps := b.reps(3)
	var before, afterRun, afterCompact, compactT, runT []float64
	for i := range reps {
		f, err := full.fork("d")
		if err != nil {
			return sec, err
		}
		s0, s1, s2, rt, ct, err := b5Rep(ctx, f, eligibleIDs(ps))
		if cerr := f.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return sec, err
		}
		before = append(before, s0)
		afterRun = append(afterRun, s1)
		afterCompact = append(afterCompact, s2)
		runT = append(runT, float64(rt))
		compactT = append(compactT, float64(ct))
		b.logf("B5: rep %d/%d: %s before, %s after the run, %s after compaction (%s)", i+1, reps,
			fmtBytes(s0), fmtBytes(s1), fmtBytes(s2), fmtDur(ct))
	}
	s0, s1, s2 := median(before), median(afterRun), median(afterCompact)
	purged := s0 - liveSize
	t := table{header: []string{"State", "Live sstable bytes", "Reclaimed of the purged data", "Time"}}
	t.add("before (eligible + live)", spread(before, fmtBytes), "–", "–")
	t.add("live data only (reference)", fmtBytes(liveSize), "–", "–")
	t.add("after run + flush + automatic compactions", spread(afterRun, fmtBytes), fmtPct((s0-s1)/purged), "run "+spread(runT, fmtDurF))
	t.add("after compacting the purged spans", spread(afterCompact, fmtBytes), fmtPct((s0-s2)/purged), "compaction "+spread(compactT, fmtDurF))
	sec.tables = append(sec.tables, t)
	reclaimed := (s0 - s2) / purged
	sec.addTarget("purged bytes reclaimed after compaction", "≥ 90%",
		fmt.Sprintf("%s (%s of %s)", fmtPct(reclaimed), fmtBytes(s0-s2), fmtBytes(purged)), reclaimed >= 0.9)
	sec.notes = append(sec.notes, fmt.Sprintf("Without a manual compaction, %s of the purged data's bytes were reclaimed once "+
		"Pebble's own compactions settled; compacting the purged spans took %s for a %s database (%s per purged MiB).",
		fmtPct((s0-s1)/purged), fmtDur(time.Duration(median(compactT))), fmtBytes(s0),
		fmtDur(time.Duration(median(compactT)/(purged/(1<<20))))))
	return sec, nil
}

// liveBytes is the size of the live sstables and blob files.
func liveBytes(db *pebble.DB) uint64 {
	m := db.Metrics()
	return m.Table.Local.LiveSize + m.BlobFiles.Local.LiveSize
}

// b5Rep measures one repetition on a fork: sizes before, after the run
// and after compacting the purged spans, with the run and compaction times.
func b5Rep(ctx context.Context, f *fork, eligible []string) (s0, s1, s2 float64, rt, ct time.Duration, err error) {
	keys, err := threadKeySet(ctx, f.db(), eligible)
	if err != nil {
		return
	}
	spans := boundingSpans(keys, nsThread, nsVersion, nsDelIndex)
	s0 = float64(liveBytes(f.db()))
	r, _, err := newRunner(f, pacing{})
	if err != nil {
		return
	}
	if _, rt, err = runOnce(ctx, r); err != nil {
		return
	}
	if err = f.db().Flush(); err != nil {
		return
	}
	if err = waitCompactions(ctx, f.db(), 30*time.Second); err != nil {
		return
	}
	s1 = float64(liveBytes(f.db()))
	start := time.Now()
	for _, s := range spans {
		if err = f.db().Compact(ctx, s[0], s[1], true); err != nil {
			return
		}
	}
	ct = time.Since(start)
	s2 = float64(liveBytes(f.db()))
	return
}

// boundingSpans returns, for each namespace, the span from its first to
// just past its last key in keys.
func boundingSpans(keys [][]byte, namespaces ...string) [][2][]byte {
	var out [][2][]byte
	for _, ns := range namespaces {
		var lo, hi []byte
		for _, k := range keys {
			if !bytes.HasPrefix(k, []byte(ns)) {
				continue
			}
			if lo == nil || bytes.Compare(k, lo) < 0 {
				lo = k
			}
			if hi == nil || bytes.Compare(k, hi) > 0 {
				hi = k
			}
		}
		if lo != nil {
			out = append(out, [2][]byte{lo, append(bytes.Clone(hi), 0)})
		}
	}
	return out
}

// waitCompactions waits until no compaction has been running for a while
// (or the limit passes).
func waitCompactions(ctx context.Context, db *pebble.DB, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	quiet := 0
	for time.Now().Before(deadline) && quiet < 5 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if db.Metrics().Compact.NumInProgress == 0 {
			quiet++
		} else {
			quiet = 0
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}
