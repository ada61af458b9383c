package retention

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

func TestPacer(t *testing.T) {
	var writes uint64
	p := newPacer(0, func() uint64 { return writes })
	now := t0

	p.observe(now)
	if p.pause() != 0 || p.batchLimit() != 0 {
		t.Fatalf("no user writes: pause %s, limit %d; want BATCH_PAUSE and BATCH_SIZE", p.pause(), p.batchLimit())
	}
	writes++
	p.observe(now)
	if p.pause() != YieldPause || p.batchLimit() != YieldBatchSize {
		t.Fatalf("user writes: pause %s, limit %d; want %s and %d", p.pause(), p.batchLimit(), YieldPause, YieldBatchSize)
	}
	// Still yielding within YieldHold of the last write seen.
	p.observe(now.Add(YieldHold / 2))
	if p.batchLimit() != YieldBatchSize {
		t.Fatal("stopped yielding within YieldHold of a user write")
	}
	p.observe(now.Add(YieldHold))
	if p.pause() != 0 || p.batchLimit() != 0 {
		t.Fatalf("quiet for YieldHold: pause %s, limit %d; want back to BATCH_PAUSE and BATCH_SIZE", p.pause(), p.batchLimit())
	}

	// A longer BATCH_PAUSE is kept while yielding.
	slow := newPacer(time.Second, func() uint64 { return writes })
	writes++
	slow.observe(now)
	if slow.pause() != time.Second {
		t.Fatalf("yielding with BATCH_PAUSE=1s: pause %s", slow.pause())
	}

	// Without a write counter (YIELD_TO_WRITES=false) nothing changes.
	off := newPacer(0, nil)
	off.observe(now)
	if off.pause() != 0 || off.batchLimit() != 0 {
		t.Fatalf("yield off: pause %s, limit %d", off.pause(), off.batchLimit())
	}
}

// TestRunYieldsToUserWrites purges two threads of 450 keys each with
// BATCH_SIZE=1000 while a user write lands at every batch boundary: the
// first thread goes in one batch, then the run sees the writes and purges
// the second in batches of at most YieldBatchSize keys, YieldPause apart.
// With YIELD_TO_WRITES=false the same run takes one batch per thread.
func TestRunYieldsToUserWrites(t *testing.T) {
	for _, yield := range []bool{true, false} {
		t.Run(fmt.Sprintf("yield=%v", yield), func(t *testing.T) {
			e := newEnv(t)
			e.cfg.YieldToWrites = yield
			for _, tid := range []string{"t1", "t2"} {
				e.thread(tid, 150, 2)
				e.deleteThread(tid)
			}
			e.at(31 * day)
			r := e.runner()
			batches := 0
			r.hooks.beforeBatch = func(ctx context.Context, b batchPoint) {
				batches++
				if _, err := e.st.CreateThread(ctx, store.Thread{ID: fmt.Sprintf("live%d", b.N)}); err != nil {
					t.Errorf("user write: %v", err)
				}
			}

			res, pauses := e.runPaced(r, time.Second)
			if res.Status != audit.RunCompleted || res.Purged != 2 || res.KeysDeleted != 2*452 {
				t.Fatalf("result %+v, want 2 threads of 452 keys purged", res)
			}
			if !yield {
				if batches != 2 || len(pauses) != 0 {
					t.Fatalf("yield off: %d batches, pauses %v; want 2 batches, no pause", batches, pauses)
				}
				return
			}
			// t2's 452 keys in batches of at most 100, after t1's one batch.
			if batches < 1+5 {
				t.Fatalf("yielding: %d batches, want at least 6", batches)
			}
			// The hook writes before the run observes, so even t1's batch waits.
			if len(pauses) != batches {
				t.Fatalf("yielding: %d pauses for %d batches, want one before every batch", len(pauses), batches)
			}
			if !strings.Contains(e.logs.String(), fmt.Sprintf(`"batches":%d,"batches_yielded":%d`, batches, batches)) {
				t.Fatalf("the run's last log line does not count %d batches, all yielded:\n%s", batches, e.logs.String())
			}
			for _, d := range pauses {
				if d < YieldPause*8/10 || d > YieldPause*12/10 {
					t.Fatalf("pause %s, want %s ±20%%", d, YieldPause)
				}
			}
		})
	}
}
