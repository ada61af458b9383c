package store

import (
	"bytes"
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// ThreadCounts splits threads by how their record is stored: sealed
// (spec §12) or plain, as written before sealing was on. A thread whose
// record is sealed may still hold plain versions of messages written
// before (`keys encrypt-existing` seals them); one whose record is plain
// holds plain content.
type ThreadCounts struct {
	Sealed int64 `json:"sealed"`
	Plain  int64 `json:"plain"`
}

// Total is every thread counted.
func (c ThreadCounts) Total() int64 { return c.Sealed + c.Plain }

// CountThreads counts the threads after `after` in ID order ("" for
// every thread), deleted ones included, by whether their record is
// sealed. It reads one record per thread and seeks past the rest of the
// thread's keys, so its cost follows the number of threads, not of
// messages. Keys of a thread without a record (a purge cut short) and an
// unreadable record are not counted: neither is a thread to seal.
func (s *Store) CountThreads(ctx context.Context, after string) (ThreadCounts, error) {
	var c ThreadCounts
	lower := []byte(threadNS)
	if after != "" {
		lower = upperBound(threadPrefix(after))
	}
	err := s.eachThread(ctx, lower, func(it *pebble.Iterator, tid string) (bool, error) {
		meta := threadMetaKey(tid)
		if it.SeekGE(meta) && bytes.Equal(it.Key(), meta) {
			if t, err := decodeThread(tid, it.Value()); err == nil {
				if t.Sealed != "" {
					c.Sealed++
				} else {
					c.Plain++
				}
			}
		}
		return false, nil
	})
	return c, err
}

// eachThread calls fn once per thread whose keys sort at or after lower,
// in ID order, with it on one of the thread's keys; fn may move it among
// them. The walk then seeks past the thread's keys, so it costs a seek per
// thread, not a step per message. fn returns stop to end the walk early.
func (s *Store) eachThread(ctx context.Context, lower []byte, fn func(it *pebble.Iterator, tid string) (stop bool, err error)) error {
	return eachThreadIn(ctx, s.db, lower, fn)
}

// eachThreadIn is eachThread on r (the store or another database, such as
// a backup's checkpoint).
func eachThreadIn(ctx context.Context, r pebble.Reader, lower []byte, fn func(it *pebble.Iterator, tid string) (stop bool, err error)) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upperBound([]byte(threadNS))})
	if err != nil {
		return fmt.Errorf("open iterator: %w", err)
	}
	defer it.Close()
	for valid := it.First(); valid; {
		if err := ctx.Err(); err != nil {
			return err
		}
		tid, _, ok := parseThreadKey(it.Key())
		if !ok {
			valid = it.Next()
			continue
		}
		if stop, err := fn(it, tid); err != nil || stop {
			return err
		}
		valid = it.SeekGE(upperBound(threadPrefix(tid)))
	}
	return it.Error()
}
