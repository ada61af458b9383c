package store

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
)

// EntrySizes returns the size of each entry [lo, hi) as stored (the
// encoded raftpb.Entry), in index order: what a replica needs to trim
// its log by bytes (docs/replication-design.md §4) after a restart or a
// snapshot, without decoding the entries.
func (l *RaftLog) EntrySizes(lo, hi uint64) ([]uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lo <= l.truncIdx {
		return nil, raft.ErrCompacted
	}
	if hi > l.last+1 || lo > hi {
		return nil, fmt.Errorf("%w: entry sizes [%d, %d) past the last index %d", ErrRaftLog, lo, hi, l.last)
	}
	if lo == hi {
		return nil, nil
	}
	it, err := l.s.db.NewIter(&pebble.IterOptions{LowerBound: raftLogKey(lo), UpperBound: raftLogKey(hi)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	sizes := make([]uint64, 0, hi-lo)
	want := lo
	for ok := it.First(); ok; ok = it.Next() {
		i, err := l.keyIndex(it.Key())
		if err != nil {
			return nil, err
		}
		if i != want {
			return nil, fmt.Errorf("%w: entry %d where %d was due", ErrMalformed, i, want)
		}
		v := it.LazyValue()
		sizes = append(sizes, uint64(v.Len()))
		want++
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	if want != hi {
		return nil, fmt.Errorf("entry %d missing: %w", want, raft.ErrUnavailable)
	}
	return sizes, nil
}
