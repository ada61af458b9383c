package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// B4: foreground impact. Latency of concurrent message writes while a run
// purges, against the same writes with no run; then a small grid of batch
// sizes and pauses.

const (
	b4Writers  = 4
	b4Warmup   = 500 * time.Millisecond
	b4Baseline = 2 * time.Second
	b4Live     = 1000
)

// b4Cell is one pacing of the grid.
type b4Cell struct {
	p                    pacing
	window               time.Duration // no run: how long the writers are recorded (b4Baseline when 0)
	runs                 []time.Duration
	keys                 int64
	p50, p99, ops, errs  []float64
	flushes, compactions []float64 // Pebble's, during the run
	sched99              []float64 // Go scheduling latency p99 over the window
	walSync99            []float64 // WAL fsync latency p99 over the window
}

func runB4(ctx context.Context, b *bench) (*section, error) {
	sec := &section{}
	e := b.scaled(200, 4)
	const m, v = 1700, 2
	ps := threadsOf("b4", 0, e, m, v, 1)
	live := threadsOf("b4l", 0, b4Live, 10, 1, 0)
	sec.setup = append(sec.setup,
		fmt.Sprintf("%d eligible threads of %d messages with %d versions (%s keys to purge) and %d live threads of 10 messages. "+
			"%d writers in a closed loop call `store.AppendMessage` (a synced write, as in production) on random live threads. "+
			"Latencies count the writes that start while the run is going (after %s of warm-up). The no-run "+
			"baseline of the whole purge records the same writers on an identical checkpoint for as long as the run "+
			"just before it took, so that both see the flushes and compactions the writers cause themselves; the grid's "+
			"baseline records them for %s. Baseline and run repetitions alternate. Go scheduling p99 is the 99th percentile of the time goroutines "+
			"of this process waited to run (`/sched/latencies:seconds`) over the same window; WAL fsync p99 is "+
			"the 99th percentile of Pebble's log fsyncs (`Metrics().LogWriter.FsyncLatency`) over the window.",
			e, m, v, count(planKeys(ps, true)), b4Live, b4Writers, b4Warmup, b4Baseline))

	sd, err := openSeeded(b.dir("b4"))
	if err != nil {
		return sec, err
	}
	defer sd.close()
	g := newGenerator("b4", time.Now())
	if _, err := g.seed(ctx, b, sd.st, "B4: seeding", append(ps, live...), false); err != nil {
		return sec, err
	}
	if err := sd.settle(ctx); err != nil {
		return sec, err
	}
	liveIDs := make([]string, len(live))
	for i, p := range live {
		liveIDs[i] = p.id
	}

	// The default pacing over the whole purge, each run followed by a
	// baseline as long as it; then a short baseline for the grid.
	reps := b.reps(3)
	def := &b4Cell{p: pacing{}}
	base := &b4Cell{}
	for i := range reps {
		if err := b4Measure(ctx, sd, liveIDs, b4Runner, def); err != nil {
			return sec, err
		}
		run := def.runs[len(def.runs)-1]
		b.logf("B4 default pacing: rep %d/%d: %s keys in %s, p50 %s p99 %s (%.0f writes)", i+1, reps, count(def.keys),
			fmtDur(run), fmtDurF(last(def.p50)), fmtDurF(last(def.p99)), last(def.ops))
		base.window = run
		if err := b4Measure(ctx, sd, liveIDs, b4NoRun, base); err != nil {
			return sec, err
		}
		b.logf("B4 no run for %s: rep %d/%d: p50 %s p99 %s (%.0f writes)", fmtDur(run), i+1, reps, fmtDurF(last(base.p50)),
			fmtDurF(last(base.p99)), last(base.ops))
	}
	bp99 := median(base.p99)
	t := table{
		caption: "Whole purge, production defaults, against no run for as long:",
		header: []string{"Variant", "Keys", "Run time", "Write p50", "Write p99", "p99 / no-run p99", "Writes measured",
			"Go scheduling p99", "WAL fsync p99", "Pebble flushes / compactions"},
	}
	row := func(name, keys, runs string, c *b4Cell, ref float64) {
		t.add(name, keys, runs, spread(c.p50, fmtDurF), spread(c.p99, fmtDurF), fmtRatio(median(c.p99)/ref),
			fmt.Sprintf("%.0f", median(c.ops)), fmtDurF(median(c.sched99)), fmtDurF(median(c.walSync99)),
			fmt.Sprintf("%.0f / %.0f", median(c.flushes), median(c.compactions)))
	}
	row("no run, as long as each run", "–", "–", base, bp99)
	row("run, production defaults ("+def.p.String()+", yielding to the writers)", count(def.keys),
		spread(durs(def.runs), fmtDurF), def, bp99)
	sec.tables = append(sec.tables, t)
	ratio := median(def.p99) / bp99
	sec.addTarget("write p99 during a run (default pacing) vs no run", "≤ 2×",
		fmt.Sprintf("%s (%s vs %s, %s keys purged)", fmtRatio(ratio), fmtDurF(median(def.p99)), fmtDurF(bp99), count(def.keys)), ratio <= 2)
	sec.notes = append(sec.notes, fmt.Sprintf("While user writes commit, a run yields (`PROGRESSDB_RETENTION_YIELD_TO_WRITES`, "+
		"on by default): batches of at most %d keys, at least %s apart, until no user write has been seen for %s; "+
		"with no competing writes (B1) it purges at BATCH_SIZE and BATCH_PAUSE. The grid below is measured with "+
		"yielding off: its BATCH_SIZE=1000, BATCH_PAUSE=0 row is what the defaults would do to the writers without it.",
		retention.YieldBatchSize, retention.YieldPause, retention.YieldHold))
	if ratio > 2 {
		sec.notes = append(sec.notes, fmt.Sprintf("Why the defaults miss ≤ 2×: a synced write waits for the log's fsync, "+
			"and during the run the 99th percentile of the log's fsyncs rises from %s to %s (Go scheduling p99 from %s "+
			"to %s). The purge's deletes go through the same log and memtables, and the flushes and compactions they "+
			"cause (%.0f and %.0f during a run, against %.0f and %.0f without it; with interleaved IDs a compaction of "+
			"the tombstones rewrites the live data around them) write to the same disk, on a machine whose %d cores "+
			"the purge, Pebble's background work and the writers share.",
			fmtDurF(median(base.walSync99)), fmtDurF(median(def.walSync99)), fmtDurF(median(base.sched99)),
			fmtDurF(median(def.sched99)), median(def.flushes), median(def.compactions), median(base.flushes),
			median(base.compactions), runtime.NumCPU()))
	}
	if errs := median(base.errs) + median(def.errs); errs > 0 {
		sec.notes = append(sec.notes, fmt.Sprintf("⚠ %.0f writes failed.", errs))
	}

	gridBase := &b4Cell{}
	for range reps {
		if err := b4Measure(ctx, sd, liveIDs, b4NoRun, gridBase); err != nil {
			return sec, err
		}
	}
	gp99 := median(gridBase.p99)

	// The grid, on an eighth of the eligible threads (MAX_ITEMS), so that
	// slow pacings finish in reasonable time.
	gridItems := max(e/8, 1)
	gridKeys := int64(gridItems) * ps[0].keys()
	var cells []*b4Cell
	for _, bs := range []int{100, 250, 1000} {
		for _, pause := range []time.Duration{0, time.Millisecond, 2 * time.Millisecond} {
			cells = append(cells, &b4Cell{p: pacing{batchSize: bs, pause: pause, pauseSet: true, maxItems: gridItems, noYield: true}})
		}
	}
	greps := b.reps(2)
	for i := range greps {
		for _, c := range cells {
			if err := b4Measure(ctx, sd, liveIDs, b4Runner, c); err != nil {
				return sec, err
			}
			b.logf("B4 grid %s: rep %d/%d: %s keys in %s, p50 %s p99 %s", c.p, i+1, greps, count(c.keys),
				fmtDur(c.runs[len(c.runs)-1]), fmtDurF(last(c.p50)), fmtDurF(last(c.p99)))
		}
	}
	gt := table{
		caption: fmt.Sprintf("Grid, with YIELD_TO_WRITES=false so that each cell's pacing holds throughout: each run purges "+
			"%d threads (MAX_ITEMS, about %s keys); the no-run p99 over %s is %s.", gridItems, count(gridKeys), b4Baseline,
			fmtDurF(gp99)),
		header: []string{"BATCH_SIZE", "BATCH_PAUSE", "Run time", "Keys/s", "Write p50", "Write p99", "p99 / no-run p99",
			"Go scheduling p99", "WAL fsync p99"},
	}
	for _, c := range cells {
		rt := medianDur(c.runs)
		gt.add(fmt.Sprint(c.p.batchSize), fmtPause(c.p.pause), spread(durs(c.runs), fmtDurF), fmtRate(rate(c.keys, rt)),
			spread(c.p50, fmtDurF), spread(c.p99, fmtDurF), fmtRatio(median(c.p99)/gp99), fmtDurF(median(c.sched99)),
			fmtDurF(median(c.walSync99)))
	}
	sec.tables = append(sec.tables, gt)
	sec.notes = append(sec.notes, b4Recommend(cells, gp99))
	return sec, nil
}

func last(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)-1]
}

func fmtPause(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return d.String()
}

// b4Recommend reads the grid: the fastest pacing whose p99 stays within
// the target, the spec's defaults, and the pacing a run yields to.
func b4Recommend(cells []*b4Cell, bp99 float64) string {
	var best, def, yield *b4Cell
	for _, c := range cells {
		switch {
		case c.p.batchSize == 1000 && c.p.pause == 0:
			def = c
		case c.p.batchSize == retention.YieldBatchSize && c.p.pause == retention.YieldPause:
			yield = c
		}
		if median(c.p99)/bp99 > 2 {
			continue
		}
		if best == nil || medianDur(c.runs) < medianDur(best.runs) {
			best = c
		}
	}
	cell := func(c *b4Cell) string {
		if c == nil {
			return "not measured"
		}
		return fmt.Sprintf("BATCH_SIZE=%d, BATCH_PAUSE=%s: run time %s, p99 %s of the no-run p99", c.p.batchSize,
			fmtPause(c.p.pause), fmtDur(medianDur(c.runs)), fmtRatio(median(c.p99)/bp99))
	}
	s := "**Reading the grid:** the spec's defaults (" + cell(def) + ") are the fastest, and what a run uses " +
		"while no user write competes. "
	if best == nil {
		s += "No pacing in the grid kept the write p99 within 2× on this machine. "
	} else {
		s += "The fastest pacing within 2× is " + cell(best) + ". "
	}
	return s + "While user writes commit, a run yields to " + cell(yield) + " in the grid; the whole purge above " +
		"shows what it gives over a run long enough to bring flushes and compactions."
}

// b4Mode is what runs beside the writers.
type b4Mode int

const (
	b4NoRun  b4Mode = iota // nothing: the baseline
	b4Runner               // a retention run with the cell's pacing
)

// b4Measure runs the writers on a fresh checkpoint beside mode and appends
// the figures to c.
func b4Measure(ctx context.Context, sd *seeded, live []string, mode b4Mode, c *b4Cell) error {
	f, err := sd.fork("w")
	if err != nil {
		return err
	}
	defer f.close()
	w := startWriters(ctx, f.st, live, b4Writers)
	select {
	case <-ctx.Done():
	case <-time.After(b4Warmup):
	}
	w.record(true)
	s0 := readSched()
	w0 := readWALSync(f.db())
	m0 := f.db().Metrics()
	var runErr error
	switch mode {
	case b4NoRun:
		window := c.window
		if window <= 0 {
			window = b4Baseline
		}
		select {
		case <-ctx.Done():
		case <-time.After(window):
		}
	case b4Runner:
		runner, _, err := newRunner(f, c.p)
		if err == nil {
			var res retention.Result
			var el time.Duration
			res, el, err = runOnce(ctx, runner)
			c.runs = append(c.runs, el)
			c.keys = res.KeysDeleted
		}
		runErr = err
	}
	m1 := f.db().Metrics()
	w.record(false)
	s1 := readSched()
	w1 := readWALSync(f.db())
	lat, errs := w.stop()
	if runErr != nil {
		return runErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(lat) == 0 {
		return fmt.Errorf("no writes completed during the measurement")
	}
	slices.Sort(lat)
	c.p50 = append(c.p50, float64(percentile(lat, 50)))
	c.p99 = append(c.p99, float64(percentile(lat, 99)))
	c.ops = append(c.ops, float64(len(lat)))
	c.errs = append(c.errs, float64(errs))
	c.sched99 = append(c.sched99, float64(schedPercentile(s0, s1, 99)))
	ws99, _ := walSyncPercentile(w0, w1, 99)
	c.walSync99 = append(c.walSync99, float64(ws99))
	c.flushes = append(c.flushes, float64(m1.Flush.Count-m0.Flush.Count))
	c.compactions = append(c.compactions, float64(m1.Compact.Count-m0.Compact.Count))
	return nil
}

// writers append messages to live threads in a closed loop.
type writers struct {
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	recording atomic.Bool
	errs      atomic.Int64

	mu  sync.Mutex
	lat []time.Duration
}

func startWriters(ctx context.Context, st *store.Store, live []string, n int) *writers {
	ctx, cancel := context.WithCancel(ctx)
	w := &writers{cancel: cancel}
	body, _ := json.Marshal(map[string]string{"text": "a message written while retention runs"})
	for i := range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			var mine []time.Duration
			for k := 0; ctx.Err() == nil; k++ {
				tid := live[(i*7919+k*104729)%len(live)]
				rec := w.recording.Load()
				start := time.Now()
				_, err := st.AppendMessage(ctx, tid, store.Message{Author: "writer", Body: body})
				d := time.Since(start)
				if err != nil {
					if ctx.Err() == nil {
						w.errs.Add(1)
					}
					continue
				}
				if rec {
					mine = append(mine, d)
				}
			}
			w.mu.Lock()
			w.lat = append(w.lat, mine...)
			w.mu.Unlock()
		}()
	}
	return w
}

func (w *writers) record(on bool) { w.recording.Store(on) }

func (w *writers) stop() ([]time.Duration, int64) {
	w.cancel()
	w.wg.Wait()
	return w.lat, w.errs.Load()
}
