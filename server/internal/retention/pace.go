package retention

import "time"

// Yielding to user writes. A purge shares the store's log, its fsyncs and
// its memtable with the chat traffic, and a large delete batch holds up
// every commit queued behind it. While user writes are committing, a run
// therefore commits batches of at most YieldBatchSize keys, at least
// YieldPause apart; once none has been seen for YieldHold it goes back to
// BATCH_SIZE and BATCH_PAUSE. PROGRESSDB_RETENTION_YIELD_TO_WRITES=false
// turns this off. The figures come from the pacing grid of
// BENCHMARKS.md (B4): 100-key batches 1 ms apart keep the p99 of
// concurrent synced writes within about 1.5 times its value with no run,
// where 250-key batches reach twice or more; longer pauses gained little.
const (
	YieldBatchSize = 100
	YieldPause     = time.Millisecond
	YieldHold      = time.Second
)

// pacer decides, before each delete batch, how long to pause and how
// large the next batch may be.
type pacer struct {
	base   time.Duration // BATCH_PAUSE
	writes func() uint64 // user writes so far; nil: never yield

	last     uint64
	seenAt   time.Time // when user writes were last seen
	yielding bool
	yielded  int // batches paced for user writes, for the run's log
}

func newPacer(base time.Duration, writes func() uint64) *pacer {
	p := &pacer{base: base, writes: writes}
	if writes != nil {
		p.last = writes()
	}
	return p
}

// observe looks for user writes committed since the last batch.
func (p *pacer) observe(now time.Time) {
	if p.writes == nil {
		return
	}
	if w := p.writes(); w != p.last {
		p.last, p.seenAt = w, now
	}
	p.yielding = !p.seenAt.IsZero() && now.Sub(p.seenAt) < YieldHold
	if p.yielding {
		p.yielded++
	}
}

// pause is the wait before the next batch, before jitter.
func (p *pacer) pause() time.Duration {
	if p.yielding {
		return max(p.base, YieldPause)
	}
	return p.base
}

// batchLimit bounds the next batch (0: BATCH_SIZE).
func (p *pacer) batchLimit() int {
	if p.yielding {
		return YieldBatchSize
	}
	return 0
}
