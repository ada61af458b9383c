package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// B7: retention policies. Run time with 1% of the messages due by max_age
// and, separately, by max_messages, at database sizes N and 4N with the
// same number due; and the latency of writes while such a run goes,
// against the same writes with no run.

const (
	b7PerThread = 100                 // live messages a thread holds
	b7MaxAge    = 90 * 24 * time.Hour // MAX_AGE of the max_age runs
)

func runB7(ctx context.Context, b *bench) (*section, error) {
	sec := &section{}
	due := b.scaled(10_000, 200) // threads with one message due, and so messages due
	n := due * (b7PerThread + 1)
	sec.setup = append(sec.setup, fmt.Sprintf(
		"N = %s messages: %s threads of %d recent messages each (created within the last day), plus one message "+
			"created 200 days ago in each of them, so 1%% of the messages are due under either policy: by `max_age` "+
			"(`MAX_AGE=90d`) and by `max_messages` (`MAX_MESSAGES=%d`: the old message is each thread's oldest beyond "+
			"its newest %d). 4N adds %s threads of %d recent messages and nothing due, so the due volume is the same. "+
			"Loaded with the store's bulk loader (which keeps the live-message indexes), flushed and compacted. "+
			"**Run**: `Runner.Run` with production defaults and one policy on, on a fresh checkpoint, N and 4N "+
			"alternating. **Writes**: one writer appends 64-byte messages to a thread of its own, back to back, "+
			"through the store (synced commits), during a `max_age` run at 4N and for as long with no run; the run "+
			"yields to user writes as in production.",
		count(int64(n)), count(int64(due)), b7PerThread, b7PerThread, b7PerThread, count(int64(3*due)), b7PerThread))

	sd, err := openSeeded(b.dir("b7"))
	if err != nil {
		return sec, err
	}
	defer sd.close()
	now := time.Now()
	if err := b7Seed(b, sd.st, "b7", 0, due, now, true); err != nil {
		return sec, err
	}
	if err := sd.settle(ctx); err != nil {
		return sec, err
	}
	sdN, err := sd.copyAs(b.dir("b7-n"))
	if err != nil {
		return sec, err
	}
	defer sdN.close()
	if err := b7Seed(b, sd.st, "b7", due, 4*due, now, false); err != nil {
		return sec, err
	}
	if err := sd.settle(ctx); err != nil {
		return sec, err
	}

	policies := []struct {
		name string
		p    pacing
	}{
		{"max_age", pacing{maxAge: b7MaxAge}},
		{"max_messages", pacing{maxMessages: b7PerThread}},
	}
	dbs := [2]*seeded{sdN, sd}
	reps := b.reps(3)
	times := map[string]*[2][]time.Duration{}
	for _, pol := range policies {
		times[pol.name] = &[2][]time.Duration{}
	}
	for i := range reps {
		for _, pol := range policies {
			for k, d := range dbs {
				el, purged, err := b7Run(ctx, d, pol.p)
				if err != nil {
					return sec, err
				}
				if purged != int64(due) {
					return sec, fmt.Errorf("B7 %s run purged %d messages, want %d", pol.name, purged, due)
				}
				times[pol.name][k] = append(times[pol.name][k], el)
			}
			b.logf("B7: rep %d: %s run %s at N, %s at 4N", i+1, pol.name,
				fmtDur(times[pol.name][0][i]), fmtDur(times[pol.name][1][i]))
		}
	}
	t := table{header: []string{"Policy", "Run at N", "Run at 4N", "4N / N"}}
	for _, pol := range policies {
		tm := times[pol.name]
		mN, m4 := medianDur(tm[0]), medianDur(tm[1])
		growth := float64(m4) / float64(mN)
		t.add(pol.name, spread(durs(tm[0]), fmtDurF), spread(durs(tm[1]), fmtDurF), fmtRatio(growth))
		sec.addTarget(fmt.Sprintf("%s run time from N to 4N, %s due", pol.name, count(int64(due))), "≤ 1.5×",
			fmt.Sprintf("%s (%s → %s)", fmtRatio(growth), fmtDur(mN), fmtDur(m4)), growth <= 1.5)
	}
	sec.tables = append(sec.tables, t)

	during, idle, err := b7Writes(ctx, sd, reps)
	if err != nil {
		return sec, err
	}
	slices.Sort(during)
	slices.Sort(idle)
	pd, pi := percentile(during, 99), percentile(idle, 99)
	wt := table{header: []string{"Writes", "Count", "p50", "p99"}}
	wt.add("no run", fmt.Sprint(len(idle)), fmtDur(percentile(idle, 50)), fmtDur(pi))
	wt.add("during a max_age run at 4N", fmt.Sprint(len(during)), fmtDur(percentile(during, 50)), fmtDur(pd))
	sec.tables = append(sec.tables, wt)
	ratio := float64(pd) / float64(pi)
	sec.addTarget("write p99 during a policy run vs no run", "≤ 2×",
		fmt.Sprintf("%s (%s vs %s)", fmtRatio(ratio), fmtDur(pd), fmtDur(pi)), ratio <= 2)
	sec.notes = append(sec.notes, "The writes are timed through the store, not over HTTP (B4 and B9 measure the HTTP "+
		"path); both sides of the ratio are the same writer on the same database, with and without a run.")
	return sec, nil
}

// b7Seed loads threads [first, last) of b7PerThread recent messages; with
// old, each also gets one message created 200 days ago.
func b7Seed(b *bench, st *store.Store, prefix string, first, last int, now time.Time, old bool) error {
	bulk := st.NewBulk()
	body := json.RawMessage(`{"text":"a message of ordinary length for the policy benchmark"}`)
	p := newProgress(b, "B7: seeding", int64(last-first))
	for i := first; i < last; i++ {
		tid := fmt.Sprintf("%s-t%07d", prefix, i)
		created := now.Add(-30 * time.Hour).UnixNano()
		if err := bulk.PutThread(store.Thread{ID: tid, Title: "t", Author: "a", CreatedTS: created, UpdatedTS: created}); err != nil {
			return err
		}
		if old {
			ts := now.Add(-200 * 24 * time.Hour).UnixNano()
			m := store.Message{ID: tid + "-old", Thread: tid, Author: "a", Body: body, TS: ts}
			if err := bulk.PutMessage([]store.Message{m}); err != nil {
				return err
			}
		}
		for j := range b7PerThread {
			ts := now.Add(-24 * time.Hour).Add(time.Duration(j) * time.Second).UnixNano()
			m := store.Message{ID: fmt.Sprintf("%s-m%03d", tid, j), Thread: tid, Author: "a", Body: body, TS: ts}
			if err := bulk.PutMessage([]store.Message{m}); err != nil {
				return err
			}
		}
		p.update(int64(i - first + 1))
	}
	p.done(int64(last - first))
	return bulk.Close()
}

// b7Run times one run with policy p on a fresh checkpoint of sd.
func b7Run(ctx context.Context, sd *seeded, p pacing) (time.Duration, int64, error) {
	f, err := sd.fork("run")
	if err != nil {
		return 0, 0, err
	}
	defer f.close()
	r, _, err := newRunner(f, p)
	if err != nil {
		return 0, 0, err
	}
	res, el, err := runOnce(ctx, r)
	return el, res.Purged, err
}

// b7Writes times back-to-back appends during max_age runs on fresh
// checkpoints of sd, and for as long on the same checkpoint with no run.
func b7Writes(ctx context.Context, sd *seeded, reps int) (during, idle []time.Duration, err error) {
	for i := range reps {
		f, err := sd.fork("writes")
		if err != nil {
			return nil, nil, err
		}
		if _, err := f.st.CreateThread(ctx, store.Thread{ID: fmt.Sprintf("writer-%d", i), Title: "w", Author: "w"}); err != nil {
			f.close()
			return nil, nil, err
		}
		r, _, err := newRunner(f, pacing{maxAge: b7MaxAge})
		if err != nil {
			f.close()
			return nil, nil, err
		}
		var (
			wg   sync.WaitGroup
			stop = make(chan struct{})
			lat  []time.Duration
			werr error
		)
		write := func() {
			defer wg.Done()
			body := json.RawMessage(`{"text":"0123456789012345678901234567890123456789012345"}`)
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				if _, err := f.st.AppendMessage(ctx, fmt.Sprintf("writer-%d", i), store.Message{Body: body}); err != nil {
					werr = err
					return
				}
				lat = append(lat, time.Since(start))
			}
		}
		wg.Add(1)
		go write()
		_, el, runErr := runOnce(ctx, r)
		close(stop)
		wg.Wait()
		during = append(during, lat...)
		if runErr != nil || werr != nil {
			f.close()
			return nil, nil, fmt.Errorf("B7 writes: run %v, write %v", runErr, werr)
		}
		// The same writer for as long, with no run.
		lat = nil
		stop = make(chan struct{})
		wg.Add(1)
		go write()
		time.Sleep(el)
		close(stop)
		wg.Wait()
		idle = append(idle, lat...)
		if err := f.close(); err != nil {
			return nil, nil, err
		}
		if werr != nil {
			return nil, nil, werr
		}
	}
	return during, idle, nil
}
