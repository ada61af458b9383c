package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// B1: purge throughput. The runner against a naive purge (every key its own
// synced write, versions found with a nested iterator per message) and
// against the lower bound (the same keys, known in advance, deleted in
// Pebble batches with one sync at the end).

// naiveBudget bounds each repetition of the naive purge: it purges whole
// threads until this much time has passed.
const naiveBudget = 3 * time.Second

// b1Shape is one data shape of B1.
type b1Shape struct {
	name               string
	threads            int // eligible threads (as many live ones again)
	messages, versions int
	primary            bool
}

func runB1(ctx context.Context, b *bench) (*section, error) {
	sec := &section{}
	shapes := []b1Shape{
		{name: "large threads", threads: b.scaled(200, 4), messages: 500, versions: 3, primary: true},
		{name: "small threads", threads: b.scaled(5000, 20), messages: 10, versions: 2},
	}
	sec.setup = append(sec.setup,
		"Each shape seeds E eligible threads (soft-deleted 40 days ago, period 30 days) of M messages "+
			"with V versions each, plus E live threads of the same shape interleaved with them in the "+
			"keyspace; message IDs are handed out round-robin across threads, as time-sortable IDs of "+
			"concurrent conversations are. The seeded database is flushed and fully compacted, and every "+
			"repetition of every variant starts from a checkpoint of it.",
		"Variants: **(a) runner**: `retention.Runner.Run` with the production configuration "+
			"(config.Load defaults: BATCH_SIZE=1000, BATCH_PAUSE=0), real audit file and real lease, "+
			"with the erase step off (`PROGRESSDB_RETENTION_ERASE=false`) so that it does the same work as (c) and (d); "+
			"the time is the whole run. **(a+e)**: the same run with the production default, erase step on; "+
			"its erase step (docs/erasure.md, measured on its own by B6) has no counterpart in the other variants. **(b) naive**: for each eligible thread, one iterator over "+
			"`thread:<tid>:`, a nested iterator over `version:msg:<mid>:` per message, and every key "+
			"deleted with its own synced write (`db.Delete(k, pebble.Sync)`); the thread list is given, "+
			"so no discovery cost is counted. It is slow, so each repetition purges whole threads for "+
			fmt.Sprintf("about %s and the rate is keys deleted over the time taken. ", naiveBudget)+
			"**(c) lower bound**: the exact key set, collected before the clock starts, deleted in "+
			"Pebble batches of 1000 keys, unsynced, the last batch committed with a sync. "+
			"**(d)**, not a target but the floor for any purge that has to read what it deletes: the same "+
			"batches, with the keys found while the clock runs (an iterator over each thread's keys and one "+
			"reused iterator seeking each message's versions).",
		"CPU time is the process's user and system time over the variant (Pebble's background work "+
			"included; for (c), over the deletion only). It is less sensitive than wall time to other work "+
			"on a shared machine.",
	)
	for _, sh := range shapes {
		if err := b1Shape1(ctx, b, sec, sh); err != nil {
			return sec, fmt.Errorf("%s: %w", sh.name, err)
		}
	}
	return sec, nil
}

// b1Variant collects one variant's repetitions.
type b1Variant struct {
	name  string
	times []time.Duration
	cpu   []time.Duration
	keys  []int64
}

func (v *b1Variant) add(keys int64, wall, cpu time.Duration) {
	v.keys = append(v.keys, keys)
	v.times = append(v.times, wall)
	v.cpu = append(v.cpu, cpu)
}

func (v *b1Variant) rates() []float64 {
	out := make([]float64, len(v.times))
	for i, d := range v.times {
		out[i] = rate(v.keys[i], d)
	}
	return out
}

func (v *b1Variant) row(t *table) {
	t.add(v.name, count(int64(median(int64s(v.keys)))), spread(durs(v.times), fmtDurF), fmtDur(medianDur(v.cpu)),
		spread(v.rates(), fmtRateF))
}

// onFork runs fn on a fresh checkpoint and returns its CPU time with fn's
// results.
func onFork(sd *seeded, name string, fn func(f *fork) (int64, time.Duration, error)) (int64, time.Duration, time.Duration, error) {
	f, err := sd.fork(name)
	if err != nil {
		return 0, 0, 0, err
	}
	c0 := cpuTime()
	n, el, err := fn(f)
	cpu := cpuTime() - c0
	if cerr := f.close(); err == nil {
		err = cerr
	}
	return n, el, cpu, err
}

func b1Shape1(ctx context.Context, b *bench, sec *section, sh b1Shape) error {
	label := "B1 " + sh.name
	ps := threadsOf("b1", 0, 2*sh.threads, sh.messages, sh.versions, 2)
	sd, err := openSeeded(b.dir("b1-" + fmt.Sprint(sh.messages)))
	if err != nil {
		return err
	}
	defer sd.close()
	g := newGenerator("b1", time.Now())
	if _, err := g.seed(ctx, b, sd.st, label+": seeding", ps, false); err != nil {
		return err
	}
	if err := sd.settle(ctx); err != nil {
		return err
	}
	eligible := eligibleIDs(ps)
	before, err := countDataKeys(sd.db())
	if err != nil {
		return err
	}

	reps := b.reps(5)
	naiveReps := b.reps(3)
	run := &b1Variant{name: "(a) runner"}
	runErase := &b1Variant{name: "(a+e) runner, erase step on"}
	naive := &b1Variant{name: "(b) naive (subset)"}
	low := &b1Variant{name: "(c) lower bound"}
	disc := &b1Variant{name: "(d) lower bound, keys discovered in the timing"}
	var runReported int64
	leftAfter := map[string]int64{}
	// check counts the data keys a variant left, on the first repetition.
	check := func(i int, name string, f *fork) error {
		if i > 0 {
			return nil
		}
		n, err := countDataKeys(f.db())
		leftAfter[name] = n
		return err
	}
	for i := range reps {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, el, cpu, err := onFork(sd, "a", func(f *fork) (int64, time.Duration, error) {
			r, _, err := newRunner(f, pacing{noErase: true})
			if err != nil {
				return 0, 0, err
			}
			res, el, err := runOnce(ctx, r)
			runReported = res.KeysDeleted
			if err != nil {
				return 0, 0, err
			}
			return res.KeysDeleted, el, check(i, "a", f)
		})
		if err != nil {
			return err
		}
		b.logf("%s: (a) runner rep %d/%d: %s keys in %s (CPU %s)", label, i+1, reps, count(n), fmtDur(el), fmtDur(cpu))
		run.add(n, el, cpu)

		n, el, cpu, err = onFork(sd, "ae", func(f *fork) (int64, time.Duration, error) {
			r, _, err := newRunner(f, pacing{})
			if err != nil {
				return 0, 0, err
			}
			res, el, err := runOnce(ctx, r)
			return res.KeysDeleted, el, err
		})
		if err != nil {
			return err
		}
		b.logf("%s: (a+e) runner with erase rep %d/%d: %s keys in %s (CPU %s)", label, i+1, reps, count(n), fmtDur(el), fmtDur(cpu))
		runErase.add(n, el, cpu)

		n, el, _, err = onFork(sd, "c", func(f *fork) (int64, time.Duration, error) {
			keys, err := threadKeySet(ctx, f.db(), eligible)
			if err != nil {
				return 0, 0, err
			}
			c0 := cpuTime()
			el, err := deleteBatched(f.db(), keys, 1000)
			if err != nil {
				return 0, 0, err
			}
			// Only the deletion is timed: report its CPU, not the collection's.
			low.cpu = append(low.cpu, cpuTime()-c0)
			return int64(len(keys)), el, check(i, "c", f)
		})
		if err != nil {
			return err
		}
		b.logf("%s: (c) lower bound rep %d/%d: %s keys in %s", label, i+1, reps, count(n), fmtDur(el))
		low.keys = append(low.keys, n)
		low.times = append(low.times, el)

		n, el, cpu, err = onFork(sd, "d", func(f *fork) (int64, time.Duration, error) {
			n, el, err := discoverAndDelete(ctx, f.db(), eligible, 1000)
			if err != nil {
				return 0, 0, err
			}
			return n, el, check(i, "d", f)
		})
		if err != nil {
			return err
		}
		b.logf("%s: (d) discover and delete rep %d/%d: %s keys in %s (CPU %s)", label, i+1, reps, count(n), fmtDur(el), fmtDur(cpu))
		disc.add(n, el, cpu)

		if i >= naiveReps {
			continue
		}
		var threads int
		n, el, cpu, err = onFork(sd, "b", func(f *fork) (int64, time.Duration, error) {
			var n int64
			var el time.Duration
			var err error
			n, el, threads, err = naivePurge(ctx, f.db(), eligible, naiveBudget)
			return n, el, err
		})
		if err != nil {
			return err
		}
		b.logf("%s: (b) naive rep %d/%d: %s keys of %d threads in %s (%s)", label, i+1, naiveReps, count(n), threads, fmtDur(el), fmtRate(rate(n, el)))
		naive.add(n, el, cpu)
	}

	// The runner reports data keys without index entries; its rate uses
	// the keys it actually removed, which the check below compares.
	removed := before - leftAfter["a"]
	for i := range run.keys {
		run.keys[i] = removed
	}
	for i := range runErase.keys {
		runErase.keys[i] = removed
	}
	t := table{
		caption: fmt.Sprintf("**%s**: E=%d eligible threads, M=%d messages, V=%d versions; %s keys to purge, %s keys in all.",
			sh.name, sh.threads, sh.messages, sh.versions, count(planKeys(ps, true)-planKeys(ps, false)), count(planKeys(ps, true))),
		header: []string{"Variant", "Keys deleted", "Time", "CPU time", "Keys/s"},
	}
	run.row(&t)
	runErase.row(&t)
	naive.row(&t)
	low.row(&t)
	disc.row(&t)
	sec.tables = append(sec.tables, t)

	if leftAfter["a"] != leftAfter["c"] || leftAfter["d"] != leftAfter["c"] {
		sec.notes = append(sec.notes, fmt.Sprintf("⚠ %s: data keys left after (a) %d, after (c) %d, after (d) %d: "+
			"the variants did not remove the same key set, so their rates are not strictly comparable.",
			sh.name, leftAfter["a"], leftAfter["c"], leftAfter["d"]))
	} else if runReported != removed {
		sec.notes = append(sec.notes, fmt.Sprintf("%s: every variant left the same %s data keys. The runner reports %s keys "+
			"deleted (it does not count deletion-index entries); its rate uses the %s keys it removed.",
			sh.name, count(leftAfter["a"]), count(runReported), count(removed)))
	}

	runRate, naiveRate := median(run.rates()), median(naive.rates())
	speedup := runRate / naiveRate
	sec.addTarget(fmt.Sprintf("%s: (a) runner vs (b) naive, keys/s", sh.name), "≥ 50×",
		fmt.Sprintf("%s (%s vs %s)", fmtRatio(speedup), fmtRate(runRate), fmtRate(naiveRate)), speedup >= 50)
	timeRatio := float64(medianDur(run.times)) / float64(medianDur(low.times))
	sec.addTarget(fmt.Sprintf("%s: (a) runner time vs (c) lower bound", sh.name), "≤ 1.5×",
		fmt.Sprintf("%s (%s vs %s)", fmtRatio(timeRatio), fmtDur(medianDur(run.times)), fmtDur(medianDur(low.times))), timeRatio <= 1.5)
	aOverD := float64(medianDur(run.times)) / float64(medianDur(disc.times))
	dOverC := float64(medianDur(disc.times)) / float64(medianDur(low.times))
	discRate := median(disc.rates())
	sec.notes = append(sec.notes, fmt.Sprintf("%s: the runner took %s the time of (d), the same point deletes with the keys "+
		"found while the clock runs (CPU %s); (d) itself took %s the time of (c). With the erase step on, the run took %s "+
		"the time of (d) (CPU %s).", sh.name, fmtRatio(aOverD), fmtRatio(float64(medianDur(run.cpu))/float64(medianDur(disc.cpu))),
		fmtRatio(dOverC), fmtRatio(float64(medianDur(runErase.times))/float64(medianDur(disc.times))),
		fmtRatio(float64(medianDur(runErase.cpu))/float64(medianDur(disc.cpu)))))
	if timeRatio > 1.5 {
		sec.notes = append(sec.notes, fmt.Sprintf("Why (a) misses ≤ 1.5× of (c) on %s: (c) is handed its keys, a purge has to "+
			"find them. A thread's messages are spread over the version keyspace (time-sortable IDs of concurrent "+
			"conversations), so finding their versions costs a seek per message, mostly a block read into a cold cache; "+
			"(d), which does only that besides the same batched deletes, already takes %s the time of (c), so no purge "+
			"that reads what it deletes can meet this target on this data. The runner's time beyond (d) (%s) is its "+
			"own work per message and per thread: decoding each message's oldest and newest version (the thread check "+
			"and the message's index entry), seeks through a memtable that fills with the purge's own tombstones "+
			"(a new iterator per thread sees them), and the durable group writes (store sync, audit fsync, synced "+
			"marker clear) every 8×BATCH_SIZE keys or 64 items. (d) reads through one iterator opened before its "+
			"first delete, on a freshly opened database: Pebble leaves the empty memtable out of it, so (d) never "+
			"seeks through tombstones. In a CPU profile of the runner (`-cpuprofile`), seeks in the memtable's "+
			"skiplist are more than a quarter of its time. A purge cannot read through an older view in the same way: "+
			"a soft-deleted thread still takes message deletes and restores until its purge begins, so only a view "+
			"opened after that sees all of its keys.", sh.name, fmtRatio(dOverC), fmtRatio(aOverD)))
	}
	if speedup < 50 {
		why := fmt.Sprintf("Why (a) misses ≥ 50× of (b) on %s: (b)'s rate is set by the disk's synced-write latency "+
			"(%s here, one synced write every %s); (a) is bounded by the reads that (d) measures (%s, %s the rate of (b)). ",
			sh.name, fmtRate(naiveRate), fmtDur(time.Duration(float64(time.Second)/naiveRate)), fmtRate(discRate),
			fmtRatio(discRate/naiveRate))
		if discRate < 50*naiveRate {
			why += "Even (d) is below 50×: on a disk with synced writes this fast, no purge that reads what it deletes meets the target."
		} else {
			why += fmt.Sprintf("Meeting 50× here needs the runner within %s of (d)'s time; it is at %s.",
				fmtRatio(discRate/(50*naiveRate)), fmtRatio(aOverD))
		}
		sec.notes = append(sec.notes, why)
	}
	return nil
}

func fmtRateF(r float64) string { return fmtRate(r) }

func int64s(xs []int64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

// deleteBatched is the lower bound: keys known in advance, deleted in
// batches of size, unsynced, with one sync on the last commit. It returns
// the time taken.
func deleteBatched(db *pebble.DB, keys [][]byte, size int) (time.Duration, error) {
	start := time.Now()
	for lo := 0; lo < len(keys); lo += size {
		hi := min(lo+size, len(keys))
		batch := db.NewBatch()
		for _, k := range keys[lo:hi] {
			if err := batch.Delete(k, nil); err != nil {
				batch.Close()
				return 0, err
			}
		}
		opts := pebble.NoSync
		if hi == len(keys) {
			opts = pebble.Sync
		}
		if err := batch.Commit(opts); err != nil {
			batch.Close()
			return 0, err
		}
		if err := batch.Close(); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// naivePurge deletes the threads' keys the way the system we are modelled
// on did: one iterator over the thread's keys, a nested iterator over each
// message's versions, and every key deleted with its own synced write,
// metadata last. It purges whole threads until budget has passed, and
// returns the keys deleted, the time taken and the threads purged.
func naivePurge(ctx context.Context, db *pebble.DB, tids []string, budget time.Duration) (int64, time.Duration, int, error) {
	// The deletion-index entries are the only keys whose names the naive
	// purge cannot find from the thread itself (the system it models had no
	// index); they are looked up before the clock starts so that it deletes
	// the same keys as the other variants.
	idx, err := indexKeys(db)
	if err != nil {
		return 0, 0, 0, err
	}
	var n int64
	threads := 0
	start := time.Now()
	for _, tid := range tids {
		if err := ctx.Err(); err != nil {
			return n, time.Since(start), threads, err
		}
		var meta []byte
		err := forEachKey(db, span(threadPrefix(tid)), func(k, v []byte) error {
			if isMetaKey(k) {
				var t store.Thread
				if err := json.Unmarshal(v, &t); err != nil || !t.Deleted {
					return fmt.Errorf("thread %s: not deleted", tid)
				}
				meta = append([]byte(nil), k...)
				return nil
			}
			if isLogKey(k) {
				mid := lastSegment(k)
				err := forEachKey(db, span(versionPrefix(mid)), func(vk, _ []byte) error {
					n++
					return db.Delete(vk, pebble.Sync)
				})
				if err != nil {
					return err
				}
				if ik, ok := idx[mid]; ok {
					if err := db.Delete(ik, pebble.Sync); err != nil {
						return err
					}
					n++
				}
			}
			n++
			return db.Delete(k, pebble.Sync)
		})
		if err != nil {
			return n, time.Since(start), threads, err
		}
		if ik, ok := idx[tid]; ok {
			if err := db.Delete(ik, pebble.Sync); err != nil {
				return n, time.Since(start), threads, err
			}
			n++
		}
		if meta != nil {
			if err := db.Delete(meta, pebble.Sync); err != nil {
				return n, time.Since(start), threads, err
			}
			n++
		}
		threads++
		if time.Since(start) >= budget {
			break
		}
	}
	return n, time.Since(start), threads, nil
}

// discoverAndDelete is the lower bound with discovery timed: the keys are
// found while the clock runs (one iterator over each thread's keys, one
// reused iterator seeking each message's versions), deleted in batches of
// size, unsynced, with one sync at the end. It is not a target, only the
// floor for a purge that must read the keys it deletes.
func discoverAndDelete(ctx context.Context, db *pebble.DB, tids []string, size int) (int64, time.Duration, error) {
	start := time.Now()
	vit, err := db.NewIter(iterOpts(span(nsVersion)))
	if err != nil {
		return 0, 0, err
	}
	defer vit.Close()
	idx, err := indexKeys(db)
	if err != nil {
		return 0, 0, err
	}
	batch := db.NewBatch()
	defer func() { batch.Close() }()
	var n int64
	del := func(k []byte) error {
		n++
		if err := batch.Delete(k, nil); err != nil {
			return err
		}
		if int(batch.Count()) < size {
			return nil
		}
		if err := batch.Commit(pebble.NoSync); err != nil {
			return err
		}
		batch.Reset()
		return nil
	}
	for _, tid := range tids {
		if err := ctx.Err(); err != nil {
			return n, 0, err
		}
		var meta []byte
		err := forEachKey(db, span(threadPrefix(tid)), func(k, _ []byte) error {
			if isMetaKey(k) {
				meta = bytes.Clone(k)
				return nil
			}
			if isLogKey(k) {
				vp := []byte(versionPrefix(lastSegment(k)))
				for ok := vit.SeekGE(vp); ok && bytes.HasPrefix(vit.Key(), vp); ok = vit.Next() {
					if err := del(vit.Key()); err != nil {
						return err
					}
				}
				if err := vit.Error(); err != nil {
					return err
				}
				if ik, ok := idx[lastSegment(k)]; ok {
					if err := del(ik); err != nil {
						return err
					}
				}
			}
			return del(k)
		})
		if err != nil {
			return n, 0, err
		}
		if ik, ok := idx[tid]; ok {
			if err := del(ik); err != nil {
				return n, 0, err
			}
		}
		if meta != nil {
			if err := del(meta); err != nil {
				return n, 0, err
			}
		}
	}
	if err := batch.Commit(pebble.Sync); err != nil {
		return n, 0, err
	}
	return n, time.Since(start), nil
}
