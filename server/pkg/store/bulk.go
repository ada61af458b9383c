package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Bulk loads data fast through large unsynced batches (seeding, benchmarks,
// fixtures). It writes the same keys and index entries as the normal API,
// but takes no locks and checks no existing data: load into a database
// nothing else is writing. A Bulk is not safe for concurrent use.
type Bulk struct {
	s      *Store
	b      *pebble.Batch
	err    error // first failure, or errBulkClosed; later calls return it
	closed bool

	// Scratch buffers, reused: batches copy what they are given.
	key, val []byte
	body     bytes.Buffer

	// live counts the live messages loaded per thread; Close adds them to
	// the threads' counts (a bulk load runs alone, before any API write).
	live map[string]int64
}

// A batch is committed once it holds this many keys or bytes.
const (
	bulkFlushKeys  = 10_000
	bulkFlushBytes = 4 << 20
)

var errBulkClosed = errors.New("bulk load already closed")

// NewBulk starts a bulk load.
func (s *Store) NewBulk() *Bulk { return &Bulk{s: s, b: s.db.NewBatch()} }

// PutThread writes a thread's metadata and its entry in the deletion index
// (deleted) or the live-thread index (not deleted).
func (b *Bulk) PutThread(t Thread) error {
	if b.err != nil {
		return b.err
	}
	if err := ValidateID(t.ID); err != nil {
		return err
	}
	if err := b.s.refusePlain(); err != nil {
		return err
	}
	if b.s.sealer != nil && t.Sealed == "" {
		// A bulk load has no caller's context: it runs alone, to its end.
		if err := b.s.sealThread(context.Background(), &t); err != nil {
			return err
		}
	}
	b.key = append(appendThreadPrefix(b.key[:0], t.ID), metaSuffix...)
	b.val = appendThreadJSON(b.val[:0], t)
	_ = b.b.Set(b.key, b.val, nil)
	if t.Deleted {
		b.key = appendDeletionKey(b.key[:0], KindThread, indexTS(t.DeletedTS), t.ID)
		_ = b.b.Set(b.key, nil, nil)
	} else {
		_ = b.b.Set(liveThreadKey(t.ID), nil, nil)
	}
	return b.maybeFlush()
}

// PutMessage writes every version of one message (oldest first), its log
// entry, and its index entry when the latest version is a tombstone. Version
// numbers left at 0 are numbered 1, 2, …; the log entry's time is the first
// version's ts.
func (b *Bulk) PutMessage(versions []Message) error {
	if b.err != nil {
		return b.err
	}
	if len(versions) == 0 {
		return fmt.Errorf("%w: message without versions", ErrInvalidArgument)
	}
	mid, tid := versions[0].ID, versions[0].Thread
	if err := validateIDs(mid, tid); err != nil {
		return err
	}
	if err := b.s.refusePlain(); err != nil {
		return err
	}
	var prev int64
	for i, m := range versions {
		if m.ID != mid || m.Thread != tid {
			return fmt.Errorf("%w: version %d of message %s names message %q in thread %q", ErrInvalidArgument, i, mid, m.ID, m.Thread)
		}
		if m.Version == 0 {
			m.Version = int64(i + 1)
		}
		if m.Version <= prev {
			return fmt.Errorf("%w: message %s: version %d after %d", ErrInvalidArgument, mid, m.Version, prev)
		}
		prev = m.Version
		if len(m.Body) > 0 {
			b.body.Reset()
			if err := json.Compact(&b.body, m.Body); err != nil {
				return fmt.Errorf("%w: message %s version %d: body is not valid JSON", ErrInvalidArgument, mid, m.Version)
			}
			m.Body = b.body.Bytes()
		}
		if b.s.sealer != nil && m.Sealed == "" {
			if err := b.s.sealMessage(context.Background(), &m); err != nil {
				return err
			}
			if i == 0 {
				_ = b.b.Set(keyIndexKey(tid, m.Key, mid), nil, nil)
			}
		}
		b.key = appendVersionKey(b.key[:0], mid, m.Version)
		b.val = appendMessageJSON(b.val[:0], m)
		_ = b.b.Set(b.key, b.val, nil)
	}
	b.key = appendLogKey(b.key[:0], tid, versions[0].TS, mid)
	_ = b.b.Set(b.key, []byte(mid), nil)
	if last := versions[len(versions)-1]; last.Deleted {
		b.key = appendDeletionKey(b.key[:0], KindMessage, indexTS(last.DeletedTS), mid)
		_ = b.b.Set(b.key, []byte(tid), nil)
	} else {
		b.key = appendAgeKey(b.key[:0], versions[0].TS, mid)
		_ = b.b.Set(b.key, []byte(tid), nil)
		if b.live == nil {
			b.live = make(map[string]int64)
		}
		b.live[tid]++
	}
	return b.maybeFlush()
}

// PutRaw writes a raw key/value (fixtures of legacy or corrupt records).
func (b *Bulk) PutRaw(key, value []byte) error {
	if b.err != nil {
		return b.err
	}
	_ = b.b.Set(key, value, nil)
	return b.maybeFlush()
}

func (b *Bulk) maybeFlush() error {
	if b.b.Count() < bulkFlushKeys && b.b.Len() < bulkFlushBytes {
		return nil
	}
	err := b.s.apply(context.Background(), write{kind: writeBulk, batch: b.b})
	b.b = b.s.db.NewBatch() // apply took the last one
	if err != nil {
		b.err = fmt.Errorf("bulk load: %w", err)
		return b.err
	}
	return nil
}

// Close commits what is buffered and syncs.
func (b *Bulk) Close() error {
	if b.closed {
		return errBulkClosed
	}
	b.closed = true
	if b.err != nil {
		_ = b.b.Close()
		return b.err
	}
	b.err = errBulkClosed
	for tid, n := range b.live {
		old, err := liveCount(b.s.db, tid)
		if err != nil {
			_ = b.b.Close()
			return fmt.Errorf("bulk load: %w", err)
		}
		setLiveCount(b.b, tid, old, old+n)
	}
	// The batch carries the sync even when empty (LogData keeps it
	// non-empty), making every earlier unsynced batch durable.
	_ = b.b.LogData(nil, nil)
	if err := b.s.apply(context.Background(), write{kind: writeBulk, batch: b.b, sync: true}); err != nil {
		return fmt.Errorf("bulk load: %w", err)
	}
	return nil
}
