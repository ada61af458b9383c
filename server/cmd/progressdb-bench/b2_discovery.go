package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// B2: discovery cost. A run that purges 10 eligible threads among N live
// ones, against a full scan of every thread's metadata (how the system we
// are modelled on found candidates), at N and at 4N.

const b2Eligible = 10

func runB2(ctx context.Context, b *bench) (*section, error) {
	sec := &section{}
	n := b.scaled(200_000, 1000)
	sec.setup = append(sec.setup,
		fmt.Sprintf("N=%s live threads of one message (one version) each, plus %d eligible threads of 10 messages "+
			"with 2 versions spread among them; then 3N more live threads are added to the same database "+
			"for the 4N measurement. **Run**: `Runner.Run` with production defaults (it finds candidates "+
			"through the deletion index and purges the %d threads, audit and lease included). "+
			"**Full scan**: one iterator over `thread:`, every `:meta` record decoded and tested for "+
			"eligibility, the way a run without an index discovers candidates (it deletes nothing). "+
			"Each repetition opens a fresh checkpoint (cold block cache, warm OS page cache) for each.",
			count(int64(n)), b2Eligible, b2Eligible))

	sd, err := openSeeded(b.dir("b2"))
	if err != nil {
		return sec, err
	}
	defer sd.close()
	g := newGenerator("b2", time.Now())
	every := n / b2Eligible
	ps := threadsOf("b2", 0, n, 1, 1, 0)
	for i := range ps {
		if i%every == every/2 {
			ps[i] = threadPlan{id: ps[i].id, messages: 10, versions: 2, deleted: true}
		}
	}
	if _, err := g.seed(ctx, b, sd.st, "B2 N: seeding", ps, false); err != nil {
		return sec, err
	}
	if err := sd.settle(ctx); err != nil {
		return sec, err
	}

	t := table{header: []string{"Threads", "Run (10 purged)", "Full scan of metadata", "Scan / run"}}
	type point struct{ run, scan time.Duration }
	var pts []point
	for step, total := range []int{n, 4 * n} {
		if step == 1 {
			more := threadsOf("b2", n, 3*n, 1, 1, 0)
			if _, err := g.seed(ctx, b, sd.st, "B2 4N: seeding", more, false); err != nil {
				return sec, err
			}
			if err := sd.settle(ctx); err != nil {
				return sec, err
			}
		}
		reps := b.reps(5)
		var runs, scans []time.Duration
		for i := range reps {
			rt, err := b2Run(ctx, sd)
			if err != nil {
				return sec, err
			}
			st, found, err := b2Scan(ctx, sd)
			if err != nil {
				return sec, err
			}
			if found != b2Eligible {
				return sec, fmt.Errorf("full scan found %d eligible threads, want %d", found, b2Eligible)
			}
			runs = append(runs, rt)
			scans = append(scans, st)
			b.logf("B2 %s threads: rep %d/%d: run %s, full scan %s", count(int64(total+b2Eligible)), i+1, reps, fmtDur(rt), fmtDur(st))
		}
		p := point{medianDur(runs), medianDur(scans)}
		pts = append(pts, p)
		label := "N"
		if step == 1 {
			label = "4N"
		}
		t.add(fmt.Sprintf("%s = %s", label, count(int64(total))), spread(durs(runs), fmtDurF), spread(durs(scans), fmtDurF),
			fmtRatio(float64(p.scan)/float64(p.run)))
	}
	sec.tables = append(sec.tables, t)

	growth := float64(pts[1].run) / float64(pts[0].run)
	sec.addTarget("run time from N to 4N", "≤ 1.5×",
		fmt.Sprintf("%s (%s → %s)", fmtRatio(growth), fmtDur(pts[0].run), fmtDur(pts[1].run)), growth <= 1.5)
	speed := float64(pts[1].scan) / float64(pts[1].run)
	sec.addTarget("full scan vs run at 4N", "≥ 100×",
		fmt.Sprintf("%s (%s vs %s)", fmtRatio(speed), fmtDur(pts[1].scan), fmtDur(pts[1].run)), speed >= 100)
	scanGrowth := float64(pts[1].scan) / float64(pts[0].scan)
	sec.notes = append(sec.notes, fmt.Sprintf("For comparison, the full scan grew %s from N to 4N.", fmtRatio(scanGrowth)))
	return sec, nil
}

// b2Run times one run on a fresh checkpoint.
func b2Run(ctx context.Context, sd *seeded) (time.Duration, error) {
	f, err := sd.fork("run")
	if err != nil {
		return 0, err
	}
	defer f.close()
	r, _, err := newRunner(f, pacing{})
	if err != nil {
		return 0, err
	}
	res, el, err := runOnce(ctx, r)
	if err != nil {
		return 0, err
	}
	if res.Purged != b2Eligible {
		return 0, fmt.Errorf("run purged %d items, want %d", res.Purged, b2Eligible)
	}
	return el, nil
}

// b2Scan times a full scan of thread metadata on a fresh checkpoint and
// returns the number of eligible threads it found.
func b2Scan(ctx context.Context, sd *seeded) (time.Duration, int, error) {
	f, err := sd.fork("scan")
	if err != nil {
		return 0, 0, err
	}
	defer f.close()
	start := time.Now()
	found, err := fullMetadataScan(ctx, f.db(), time.Now().Add(-period))
	return time.Since(start), found, err
}

// fullMetadataScan reads every thread's metadata and counts the eligible
// threads (deleted before cutoff, not on hold).
func fullMetadataScan(ctx context.Context, db *pebble.DB, cutoff time.Time) (int, error) {
	found := 0
	n := 0
	err := forEachKey(db, span(nsThread), func(k, v []byte) error {
		if n++; n%65536 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if !isMetaKey(k) {
			return nil
		}
		var t store.Thread
		if err := json.Unmarshal(v, &t); err != nil {
			return nil // malformed: skipped, as a run would
		}
		if t.Deleted && t.DeletedTS > 0 && t.DeletedTS <= cutoff.UnixNano() && !t.LegalHold {
			found++
		}
		return nil
	})
	return found, err
}
