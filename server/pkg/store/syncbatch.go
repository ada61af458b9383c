package store

import (
	"sync"
	"sync/atomic"
)

// CommitBatchBounds are the upper bounds of CommitBatches' buckets: writes
// per fsync of the log, in powers of two.
var CommitBatchBounds = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}

// CommitBatches is how many acknowledged writes each fsync of the log
// carried: group commit's batch sizes, as a cumulative histogram.
type CommitBatches struct {
	// Buckets[i] counts the fsyncs that carried at most
	// CommitBatchBounds[i] writes; Count counts them all.
	Buckets []uint64
	Count   uint64
	// Sum is the writes they carried.
	Sum uint64
}

// syncBatches counts group commit's batches. A grouped write counts itself
// as pending just before its batch enters the log (applyGrouped); each
// sync of a log file, as it begins (pebbledir.Options.OnLogSync), takes
// the pending count as its batch: the log is synced in order, so it makes
// every one of them durable. A write that reaches the log while a sync is
// starting may be counted with that sync instead of the next; the sums are
// exact, and a lone writer's every sync counts 1. A sync that carries no
// counted write (one of the server's own writes, or a log's last sync at
// rotation) is not observed: it is no batch of group commit.
type syncBatches struct {
	pending atomic.Uint64

	mu      sync.Mutex
	buckets []uint64 // per bound, not cumulative; the last is above every bound
	count   uint64
	sum     uint64
}

func newSyncBatches() *syncBatches {
	return &syncBatches{buckets: make([]uint64, len(CommitBatchBounds)+1)}
}

// written counts a grouped write whose batch is in the log.
func (b *syncBatches) written() { b.pending.Add(1) }

// syncing observes the batch a sync of the log is about to make durable.
func (b *syncBatches) syncing() {
	n := b.pending.Swap(0)
	if n == 0 {
		return
	}
	i := 0
	for i < len(CommitBatchBounds) && float64(n) > CommitBatchBounds[i] {
		i++
	}
	b.mu.Lock()
	b.buckets[i]++
	b.count++
	b.sum += n
	b.mu.Unlock()
}

// CommitBatches returns how many writes the log's fsyncs carried since the
// store was opened.
func (s *Store) CommitBatches() CommitBatches {
	b := s.batches
	b.mu.Lock()
	defer b.mu.Unlock()
	out := CommitBatches{Buckets: make([]uint64, len(CommitBatchBounds)), Count: b.count, Sum: b.sum}
	var cum uint64
	for i := range CommitBatchBounds {
		cum += b.buckets[i]
		out.Buckets[i] = cum
	}
	return out
}
