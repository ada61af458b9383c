package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/progressdb/progressdb/audit"
)

// B6: erasure cost. The erase step (docs/erasure.md) beside the run itself,
// at database sizes N and 4N holding the same purged threads, and the p99
// of concurrent writes during a run with erasure against one without and
// against no run.

const (
	b6Messages = 40
	b6Versions = 2
	b6Writers  = b4Writers
)

// b6Size is one database size's figures, one entry per repetition.
type b6Size struct {
	label                 string
	threads, eligible     int
	bytes                 float64
	runNoErase, runErase  []float64 // whole run, ns
	erase                 []float64 // footer erase_ms, as ns
	p99None, p99NoErase   []float64
	p99Erase, eraseShares []float64
}

func runB6(ctx context.Context, b *bench) (*section, error) {
	sec := &section{}
	e := b.scaled(50, 4)
	t := b.scaled(500, 2*e)
	sec.setup = append(sec.setup, fmt.Sprintf("Databases of %d (N) and %d (4N) threads of %d messages with %d versions, "+
		"flushed and fully compacted; in both, %d of the threads are soft-deleted and eligible, spread evenly over the "+
		"keyspace (their messages' IDs interleave with live ones, as time-sortable IDs of concurrent conversations do), so "+
		"each run purges the same volume. Each repetition starts from a checkpoint: a run with "+
		"`PROGRESSDB_RETENTION_ERASE=false` (the purge alone), a run with erasure (production defaults, `ERASE_RATE=32` MiB/s; the erase "+
		"time is the footer's `erase_ms`), and %d writers appending messages to live threads during a run without erasure, a run "+
		"with it, and no run (as long as the run with erasure took).",
		t, 4*t, b6Messages, b6Versions, e, b6Writers))

	sizes := []*b6Size{{label: "N", threads: t}, {label: "4N", threads: 4 * t}}
	reps := b.reps(3)
	for _, sz := range sizes {
		ps := threadsOf("b6", 0, sz.threads, b6Messages, b6Versions, sz.threads/e)
		sz.eligible = len(eligibleIDs(ps))
		sd, err := openSeeded(b.dir("b6-" + sz.label))
		if err != nil {
			return sec, err
		}
		if _, err := newGenerator("b6", time.Now()).seed(ctx, b, sd.st, "B6: seeding "+sz.label, ps, false); err != nil {
			sd.close()
			return sec, err
		}
		if err := sd.settle(ctx); err != nil {
			sd.close()
			return sec, err
		}
		sz.bytes = sizeOf(sd.db()).bytes
		live := liveIDs(ps)
		for i := range reps {
			if err := b6Rep(ctx, sd, live, sz); err != nil {
				sd.close()
				return sec, err
			}
			b.logf("B6 %s: rep %d/%d: run %s without erasure, %s with (erase %s); write p99 %s none, %s without, %s with",
				sz.label, i+1, reps, fmtDurF(last(sz.runNoErase)), fmtDurF(last(sz.runErase)), fmtDurF(last(sz.erase)),
				fmtDurF(last(sz.p99None)), fmtDurF(last(sz.p99NoErase)), fmtDurF(last(sz.p99Erase)))
		}
		if err := sd.close(); err != nil {
			return sec, err
		}
	}

	tb := table{header: []string{"Size", "Threads (eligible)", "Live sstable bytes", "Run without erasure",
		"Run with erasure", "Erase step (footer)", "Erase / run without"}}
	for _, sz := range sizes {
		tb.add(sz.label, fmt.Sprintf("%d (%d)", sz.threads, sz.eligible), fmtBytes(sz.bytes),
			spread(sz.runNoErase, fmtDurF), spread(sz.runErase, fmtDurF), spread(sz.erase, fmtDurF),
			fmtRatio(median(sz.erase)/median(sz.runNoErase)))
	}
	sec.tables = append(sec.tables, tb)
	lat := table{header: []string{"Size", "Write p99, no run", "during a run without erasure", "during a run with erasure",
		"with erasure / no run"}}
	for _, sz := range sizes {
		lat.add(sz.label, spread(sz.p99None, fmtDurF), spread(sz.p99NoErase, fmtDurF), spread(sz.p99Erase, fmtDurF),
			fmtRatio(median(sz.p99Erase)/median(sz.p99None)))
	}
	sec.tables = append(sec.tables, lat)

	n, n4 := sizes[0], sizes[1]
	growth := median(n4.erase) / median(n.erase)
	sec.addTarget("erase time N → 4N at equal purged volume", "≤ 1.5x",
		fmt.Sprintf("%s (%s → %s)", fmtRatio(growth), fmtDurF(median(n.erase)), fmtDurF(median(n4.erase))), growth <= 1.5)
	p99Held := true
	for _, sz := range sizes {
		r := median(sz.p99Erase) / median(sz.p99None)
		p99Held = p99Held && r <= 2
		sec.addTarget(fmt.Sprintf("write p99 during a run with erasure (%s) / no run", sz.label), "≤ 2x",
			fmt.Sprintf("%s (%s vs %s)", fmtRatio(r), fmtDurF(median(sz.p99Erase)), fmtDurF(median(sz.p99None))), r <= 2)
	}
	if growth > 1.5 {
		sec.notes = append(sec.notes, fmt.Sprintf("The erase step grows with the database (%s for 4x the data): the purged "+
			"messages' keys are spread over the whole version keyspace, so compacting their ranges rewrites every table "+
			"that holds any of them; with the same purged volume clustered (old threads with time-sortable IDs) it "+
			"would touch only the tables of that cluster. Its I/O is bounded by `PROGRESSDB_RETENTION_ERASE_RATE`. "+
			"See docs/erasure.md.", fmtRatio(growth)))
	}
	if !p99Held {
		sec.notes = append(sec.notes, "The write p99 target is missed in this run. The window is short (as long as "+
			"one run with erasure), so a handful of slow writes make its p99; which part of the erase step they wait "+
			"on (the flush, the log rotations, or the compactions' writes) is not measured here.")
	}
	return sec, nil
}

// liveIDs are the threads not deleted, for the writers.
func liveIDs(ps []threadPlan) []string {
	var ids []string
	for _, p := range ps {
		if !p.deleted {
			ids = append(ids, p.id)
		}
	}
	return ids
}

// b6Rep measures one repetition of one size.
func b6Rep(ctx context.Context, sd *seeded, live []string, sz *b6Size) error {
	// The purge alone, then the run with erasure, each on a fresh copy.
	el, _, err := b6Run(ctx, sd, pacing{noErase: true})
	if err != nil {
		return err
	}
	sz.runNoErase = append(sz.runNoErase, float64(el))
	el, erase, err := b6Run(ctx, sd, pacing{})
	if err != nil {
		return err
	}
	sz.runErase = append(sz.runErase, float64(el))
	sz.erase = append(sz.erase, float64(erase))

	// Writers beside each, and beside nothing for as long.
	for _, mode := range []int{0, 1, 2} {
		p99, err := b6Writes(ctx, sd, live, mode, time.Duration(last(sz.runErase)))
		if err != nil {
			return err
		}
		switch mode {
		case 0:
			sz.p99None = append(sz.p99None, float64(p99))
		case 1:
			sz.p99NoErase = append(sz.p99NoErase, float64(p99))
		case 2:
			sz.p99Erase = append(sz.p99Erase, float64(p99))
		}
	}
	return nil
}

// b6Run runs retention once on a fresh copy and returns its duration and
// the erase time its footer reports.
func b6Run(ctx context.Context, sd *seeded, p pacing) (time.Duration, time.Duration, error) {
	f, err := sd.fork("r")
	if err != nil {
		return 0, 0, err
	}
	defer f.close()
	r, _, err := newRunner(f, p)
	if err != nil {
		return 0, 0, err
	}
	res, el, err := runOnce(ctx, r)
	if err != nil {
		return 0, 0, err
	}
	if res.Purged == 0 {
		return 0, 0, fmt.Errorf("B6: the run purged nothing")
	}
	sum, err := audit.LastRun(f.auditDir())
	if err != nil || sum == nil || sum.Footer == nil {
		return 0, 0, fmt.Errorf("B6: read the run's footer: %v", err)
	}
	if !p.noErase && !sum.Footer.Erased {
		return 0, 0, fmt.Errorf("B6: the run with erasure did not erase")
	}
	return el, time.Duration(sum.Footer.EraseMS) * time.Millisecond, nil
}

// b6Writes runs the writers on a fresh copy beside no run (mode 0, for
// window), a run without erasure (1) or with it (2), and returns their p99.
func b6Writes(ctx context.Context, sd *seeded, live []string, mode int, window time.Duration) (time.Duration, error) {
	f, err := sd.fork("w")
	if err != nil {
		return 0, err
	}
	defer f.close()
	w := startWriters(ctx, f.st, live, b6Writers)
	select {
	case <-ctx.Done():
	case <-time.After(b4Warmup):
	}
	w.record(true)
	var runErr error
	if mode == 0 {
		select {
		case <-ctx.Done():
		case <-time.After(window):
		}
	} else {
		r, _, err := newRunner(f, pacing{noErase: mode == 1})
		if err == nil {
			_, _, err = runOnce(ctx, r)
		}
		runErr = err
	}
	w.record(false)
	lat, _ := w.stop()
	if runErr != nil {
		return 0, runErr
	}
	if len(lat) == 0 {
		return 0, fmt.Errorf("B6: no writes completed during the measurement")
	}
	slices.Sort(lat)
	return percentile(lat, 99), nil
}
