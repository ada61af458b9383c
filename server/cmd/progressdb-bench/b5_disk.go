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

// b5Size is the live sstable (and blob file) bytes and the table count.
type b5Size struct {
	bytes, files float64
	keys         int64 // data keys, where counted
}

func sizeOf(db *pebble.DB) b5Size {
	m := db.Metrics()
	var files int64
	for _, l := range m.Levels {
		files += l.TablesCount
	}
	return b5Size{bytes: float64(m.Table.Local.LiveSize + m.BlobFiles.Local.LiveSize), files: float64(files)}
}

// b5States collects one state's repetitions.
type b5States struct{ bytes, files []float64 }

func (s *b5States) add(z b5Size) {
	s.bytes = append(s.bytes, z.bytes)
	s.files = append(s.files, z.files)
}

func runB5(ctx context.Context, b *bench) (*section, error) {
	sec := &section{}
	e := b.scaled(1000, 4)
	const m, v = 200, 3
	ps := threadsOf("b5", 0, 2*e, m, v, 2)
	sec.setup = append(sec.setup,
		fmt.Sprintf("%d eligible and %d live threads of %d messages with %d versions, interleaved, flushed and fully "+
			"compacted. Size is Pebble's live sstable and blob-file bytes (`Metrics().Table.Local.LiveSize` + "+
			"`BlobFiles.Local.LiveSize`; WAL excluded). The purged data's size is the database's size before the run "+
			"minus the size of a reference database seeded with the live threads alone (same IDs and contents) and "+
			"settled the same way. Steps: before; after a run with production defaults, a flush and Pebble's own "+
			"compactions settling; after `DB().Compact` over the purged spans (from the first to the last purged key "+
			"in each of `thread:`, `version:msg:` and `idx:del:`; with interleaved IDs these spans cover most of the "+
			"keyspace). Reclaimed is the shrinkage over the purged data's size.", e, e, m, v))

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
	keys, err := threadKeySet(ctx, full.db(), eligibleIDs(ps))
	if err != nil {
		return sec, err
	}
	spans := boundingSpans(keys, nsThread, nsVersion, nsDelIndex)
	keys = nil

	ref, err := b5Reference(ctx, b, ps)
	if err != nil {
		return sec, err
	}

	reps := b.reps(3)
	var before, afterRun, afterCompact b5States
	var compactT, runT []float64
	var leftKeys int64
	for i := range reps {
		f, err := full.fork("d")
		if err != nil {
			return sec, err
		}
		s, rt, ct, err := b5Rep(ctx, f, spans)
		if err == nil && i == 0 {
			leftKeys, err = countDataKeys(f.db())
		}
		if cerr := f.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return sec, err
		}
		before.add(s[0])
		afterRun.add(s[1])
		afterCompact.add(s[2])
		runT = append(runT, float64(rt))
		compactT = append(compactT, float64(ct))
		b.logf("B5: rep %d/%d: %s before, %s after the run, %s after compaction (%s)", i+1, reps,
			fmtBytes(s[0].bytes), fmtBytes(s[1].bytes), fmtBytes(s[2].bytes), fmtDur(ct))
	}
	s0, s1, s2 := median(before.bytes), median(afterRun.bytes), median(afterCompact.bytes)
	purged := s0 - ref.bytes
	reclaimedRun := (s0 - s1) / purged
	reclaimed := (s0 - s2) / purged
	files := func(xs []float64) string { return fmt.Sprintf("%.0f", median(xs)) }
	t := table{header: []string{"State", "Live sstable bytes", "Files", "Reclaimed of the purged data", "Time"}}
	t.add("reference: the live threads alone", fmtBytes(ref.bytes), fmt.Sprintf("%.0f", ref.files), "–", "–")
	t.add("before", spread(before.bytes, fmtBytes), files(before.files), "–", "–")
	t.add("after run + flush + automatic compactions", spread(afterRun.bytes, fmtBytes), files(afterRun.files),
		fmtPct(reclaimedRun), "run "+spread(runT, fmtDurF))
	t.add("after compacting the purged spans", spread(afterCompact.bytes, fmtBytes), files(afterCompact.files),
		fmtPct(reclaimed), "compaction "+spread(compactT, fmtDurF))
	sec.tables = append(sec.tables, t)
	sec.addTarget("purged bytes reclaimed after compaction", "≥ 90%",
		fmt.Sprintf("%s (%s of %s)", fmtPct(reclaimed), fmtBytes(s0-s2), fmtBytes(purged)), reclaimed >= 0.9)
	if leftKeys != ref.keys {
		sec.notes = append(sec.notes, fmt.Sprintf("⚠ After the run %d data keys were left; the reference holds %d.", leftKeys, ref.keys))
	}
	if s2 < ref.bytes {
		sec.notes = append(sec.notes, fmt.Sprintf("After the compaction the database holds the same %s data keys as the "+
			"reference but takes %s less: its files come from a different compaction (%s files against the "+
			"reference's %.0f), so the reclaimed share exceeds 100%% by a matter of layout, not data.",
			count(ref.keys), fmtBytes(ref.bytes-s2), files(afterCompact.files), ref.files))
	}
	sec.notes = append(sec.notes, fmt.Sprintf("Without a manual compaction, %s of the purged data's bytes were reclaimed "+
		"once Pebble's own compactions settled; compacting the purged spans took %s for a %s database (%s per purged MiB).",
		fmtPct(reclaimedRun), fmtDur(time.Duration(median(compactT))), fmtBytes(s0),
		fmtDur(time.Duration(median(compactT)/(purged/(1<<20))))))
	return sec, nil
}

// b5Reference seeds the live threads alone, settles them and returns
// their size.
func b5Reference(ctx context.Context, b *bench, ps []threadPlan) (b5Size, error) {
	sd, err := openSeeded(b.dir("b5-live"))
	if err != nil {
		return b5Size{}, err
	}
	defer sd.close()
	if _, err := newGenerator("b5", time.Now()).seed(ctx, b, sd.st, "B5: seeding live only", ps, true); err != nil {
		return b5Size{}, err
	}
	if err := sd.settle(ctx); err != nil {
		return b5Size{}, err
	}
	z := sizeOf(sd.db())
	z.keys, err = countDataKeys(sd.db())
	return z, err
}

// b5Rep measures one repetition on a fork: sizes before, after the run and
// after compacting the purged spans, with the run and compaction times.
func b5Rep(ctx context.Context, f *fork, spans [][2][]byte) (s [3]b5Size, rt, ct time.Duration, err error) {
	s[0] = sizeOf(f.db())
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
	s[1] = sizeOf(f.db())
	start := time.Now()
	for _, sp := range spans {
		if err = f.db().Compact(ctx, sp[0], sp[1], true); err != nil {
			return
		}
	}
	ct = time.Since(start)
	s[2] = sizeOf(f.db())
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

// waitCompactions waits until no compaction has been running for half a
// second (or the limit passes).
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
