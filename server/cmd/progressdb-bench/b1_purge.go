//go:build benchdraft

package main

import (
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
			"(config.Load defaults: BATCH_SIZE=1000, BATCH_PAUSE=0), real audit file and real lease; "+
			"the time is the whole run. **(b) naive**: for each eligible thread, one iterator over "+
			"`thread:<tid>:`, a nested iterator over `version:msg:<mid>:` per message, and every key "+
			"deleted with its own synced write (`db.Delete(k, pebble.Sync)`); the thread list is given, "+
			"so no discovery cost is counted. It is slow, so each repetition purges whole threads for "+
			fmt.Sprintf("about %s and the rate is keys deleted over the time taken. ", naiveBudget)+
			"**(c) lower bound**: the exact key set, collected before the clock starts, deleted in "+
			"Pebble batches of 1000 keys, unsynced, the last batch committed with a sync.",
	)
	for _, sh := range shapes {
		if err := b1Shape1(ctx, b, sec, sh); err != nil {
			return sec, fmt.Errorf("%s: %w", sh.name, err)
		}
	}
	return sec, nil
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
	wantKeys := planKeys(ps, true) - planKeys(ps, false)

	reps := b.reps(5)
	naiveReps := b.reps(3)
	var (
		runT, lowT             []time.Duration
		runKeys, lowKeys       int64
		naiveRates             []float64
		naiveKeys              []int64
		naiveTimes             []time.Duration
		keysAfterRun, keysLeft int64 = -1, -1
	)
	for i := range reps {
		if err := ctx.Err(); err != nil {
			return err
		}
		// (a) the runner.
		f, err := sd.fork("a")
		if err != nil {
			return err
		}
		r, _, err := newRunner(f, pacing{})
		if err != nil {
			f.close()
			return err
		}
		res, el, err := runOnce(ctx, r)
		if err == nil && i == 0 {
			keysAfterRun, err = countDataKeys(f.db())
		}
		if cerr := f.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		runT = append(runT, el)
		runKeys = res.KeysDeleted
		b.logf("%s: (a) runner rep %d/%d: %s keys in %s (%s)", label, i+1, reps, count(res.KeysDeleted), fmtDur(el), fmtRate(rate(res.KeysDeleted, el)))

		// (c) the lower bound.
		f, err = sd.fork("c")
		if err != nil {
			return err
		}
		keys, err := threadKeySet(ctx, f.db(), eligible)
		var lt time.Duration
		if err == nil {
			lt, err = deleteBatched(f.db(), keys, 1000)
		}
		if err == nil && i == 0 {
			keysLeft, err = countDataKeys(f.db())
		}
		if cerr := f.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		lowT = append(lowT, lt)
		lowKeys = int64(len(keys))
		b.logf("%s: (c) lower bound rep %d/%d: %s keys in %s (%s)", label, i+1, reps, count(lowKeys), fmtDur(lt), fmtRate(rate(lowKeys, lt)))

		// (b) the naive purge, on fewer repetitions.
		if i >= naiveReps {
			continue
		}
		f, err = sd.fork("b")
		if err != nil {
			return err
		}
		nk, nt, nthreads, err := naivePurge(ctx, f.db(), eligible, naiveBudget)
		if cerr := f.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		naiveKeys = append(naiveKeys, nk)
		naiveTimes = append(naiveTimes, nt)
		naiveRates = append(naiveRates, rate(nk, nt))
		b.logf("%s: (b) naive rep %d/%d: %s keys of %d threads in %s (%s)", label, i+1, naiveReps, count(nk), nthreads, fmtDur(nt), fmtRate(rate(nk, nt)))
	}

	runRates := make([]float64, len(runT))
	for i, d := range runT {
		runRates[i] = rate(lowKeys, d)
	}
	lowRates := make([]float64, len(lowT))
	for i, d := range lowT {
		lowRates[i] = rate(lowKeys, d)
	}
	naiveKeysMed := median(int64s(naiveKeys))
	t := table{
		caption: fmt.Sprintf("**%s**: E=%d eligible threads, M=%d messages, V=%d versions; %s keys to purge, %s keys in all.",
			sh.name, sh.threads, sh.messages, sh.versions, count(wantKeys), count(planKeys(ps, true))),
		header: []string{"Variant", "Keys deleted", "Time", "Keys/s"},
	}
	t.add("(a) runner", count(runKeys), spread(durs(runT), fmtDurF), spread(runRates, fmtRateF))
	t.add("(b) naive (subset)", count(int64(naiveKeysMed)), spread(durs(naiveTimes), fmtDurF), spread(naiveRates, fmtRateF))
	t.add("(c) lower bound", count(lowKeys), spread(durs(lowT), fmtDurF), spread(lowRates, fmtRateF))
	sec.tables = append(sec.tables, t)

	switch {
	case keysAfterRun != keysLeft:
		sec.notes = append(sec.notes, fmt.Sprintf("⚠ %s: after the runner %d data keys were left, after the lower bound %d. "+
			"The variants did not remove the same key set, so their rates are not strictly comparable.",
			sh.name, keysAfterRun, keysLeft))
	case runKeys != lowKeys:
		sec.notes = append(sec.notes, fmt.Sprintf("%s: both variants left the same %d data keys; the runner reports %d keys deleted "+
			"where the key set holds %d (it counts differently); rates use the key set's size.",
			sh.name, keysLeft, runKeys, lowKeys))
	}

	// Targets: throughput ratios (keys/s) and the time ratio against (c).
	speedup := median(runRates) / median(naiveRates)
	sec.addTarget(fmt.Sprintf("%s: (a) runner vs (b) naive, keys/s", sh.name), "≥ 50×",
		fmt.Sprintf("%s (%s vs %s)", fmtRatio(speedup), fmtRate(median(runRates)), fmtRate(median(naiveRates))), speedup >= 50)
	timeRatio := float64(medianDur(runT)) / float64(medianDur(lowT))
	sec.addTarget(fmt.Sprintf("%s: (a) runner time vs (c) lower bound", sh.name), "≤ 1.5×",
		fmt.Sprintf("%s (%s vs %s)", fmtRatio(timeRatio), fmtDur(medianDur(runT)), fmtDur(medianDur(lowT))), timeRatio <= 1.5)
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
