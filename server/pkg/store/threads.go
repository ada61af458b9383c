package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// ListOptions page through threads or messages. Cursor is opaque ("" = start).
type ListOptions struct {
	Limit          int // default 100, max 1000
	Cursor         string
	IncludeDeleted bool
}

// A page's size when ListOptions.Limit is zero, and the largest one.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

func (o ListOptions) limit() (int, error) {
	switch {
	case o.Limit < 0:
		return 0, fmt.Errorf("%w: limit %d is negative", ErrInvalidArgument, o.Limit)
	case o.Limit == 0:
		return DefaultListLimit, nil
	default:
		return min(o.Limit, MaxListLimit), nil
	}
}

// readThread loads and decodes a thread's metadata.
func (s *Store) readThread(tid string) (Thread, error) {
	// Decoded in place (decodeThread copies what it keeps): every append
	// and every page of messages reads its thread.
	v, closer, err := s.db.Get(threadMetaKey(tid))
	if errors.Is(err, pebble.ErrNotFound) {
		return Thread{}, fmt.Errorf("thread %s: %w", tid, ErrNotFound)
	}
	if err != nil {
		return Thread{}, fmt.Errorf("read thread %s: %w", tid, err)
	}
	defer closer.Close()
	return decodeThread(tid, v)
}

// refusePurging answers ErrPurgeInProgress once thread tid's purge has begun.
func (s *Store) refusePurging(_ context.Context, tid, op string) error {
	if started, err := s.purgeStarted(KindThread, tid); err != nil {
		return err
	} else if started {
		return fmt.Errorf("%s %s: %w", op, tid, ErrPurgeInProgress)
	}
	return nil
}

// purgeStarted reports whether a purge marker exists for the item.
func (s *Store) purgeStarted(kind ItemKind, id string) (bool, error) {
	return s.has(purgeKey(kind, id))
}

// putThreadRecord writes t's metadata in the shape it has: a sealed
// thread's seal is carried as it is (its associated data binds no field
// that changes), so flags and stamps need no key.
func putThreadRecord(b *pebble.Batch, t Thread) {
	_ = b.Set(threadMetaKey(t.ID), appendThreadJSON(nil, t), nil)
}

// writeThread writes t's metadata, sealing its title and author first
// when the store seals and t has no seal yet (a new thread, a new title,
// or a plain thread changed after sealing was turned on).
func (s *Store) writeThread(ctx context.Context, b *pebble.Batch, t *Thread) error {
	if err := s.refusePlain(); err != nil {
		return err
	}
	if s.sealer != nil && t.Sealed == "" {
		if err := s.sealThread(ctx, t); err != nil {
			return err
		}
	}
	putThreadRecord(b, *t)
	return nil
}

// CreateThread stores a new thread. t.ID may be empty (generated); ErrExists
// when the ID is taken (even by a soft-deleted thread).
func (s *Store) CreateThread(ctx context.Context, t Thread) (Thread, error) {
	if err := ctx.Err(); err != nil {
		return Thread{}, err
	}
	if t.ID == "" {
		t.ID = s.NewID()
	} else if err := ValidateID(t.ID); err != nil {
		return Thread{}, err
	}
	h := s.hold(t.ID)
	defer h.release()

	// Any key left under the prefix (even of a half-purged thread) keeps
	// the ID taken, so a new thread never inherits old messages.
	taken, err := s.hasRange(threadPrefix(t.ID), threadEnd(t.ID))
	if err != nil {
		return Thread{}, err
	}
	if taken {
		return Thread{}, fmt.Errorf("thread %s: %w", t.ID, ErrExists)
	}
	// Until its audit record is written, a purged thread's ID stays taken.
	if pending, err := s.purgeStarted(KindThread, t.ID); err != nil {
		return Thread{}, err
	} else if pending {
		return Thread{}, fmt.Errorf("thread %s: %w", t.ID, ErrPurgeInProgress)
	}

	now := s.now().UnixNano()
	t.CreatedTS, t.UpdatedTS = now, now
	t.Deleted, t.DeletedTS = false, 0
	b := s.db.NewBatch()
	if err := s.writeThread(ctx, b, &t); err != nil {
		_ = b.Close()
		return Thread{}, err
	}
	_ = b.Set(liveThreadKey(t.ID), nil, nil)
	if err := s.apply(ctx, write{kind: writeUser, batch: b, held: h, answer: answer{thread: &t}}); err != nil {
		return Thread{}, fmt.Errorf("create thread %s: %w", t.ID, err)
	}
	return t, nil
}

// GetThread returns the thread's metadata, deleted or not. ErrNotFound when
// absent; ErrMalformed when the stored record cannot be decoded.
func (s *Store) GetThread(ctx context.Context, tid string) (Thread, error) {
	if err := ctx.Err(); err != nil {
		return Thread{}, err
	}
	if err := ValidateID(tid); err != nil {
		return Thread{}, err
	}
	t, err := s.readThread(tid)
	if err != nil {
		return t, err
	}
	return t, s.openThread(ctx, &t)
}

// DeleteThread soft-deletes; a repeated delete keeps the first deleted_ts.
// The metadata, the deletion index entry and the removal of the live-thread
// index entry are written in one batch.
func (s *Store) DeleteThread(ctx context.Context, tid string) (Thread, error) {
	return s.updateThread(ctx, tid, "delete thread", nil, func(t *Thread, b *pebble.Batch) bool {
		if t.Deleted {
			return false
		}
		now := s.now().UnixNano()
		t.Deleted, t.DeletedTS, t.UpdatedTS = true, now, now
		_ = b.Set(deletionKey(KindThread, indexTS(now), tid), nil, nil)
		_ = b.Delete(liveThreadKey(tid), nil)
		return true
	})
}

// RestoreThread undoes a soft delete; ErrPurgeInProgress once a purge began.
// The metadata and the moves between the indexes are one batch.
func (s *Store) RestoreThread(ctx context.Context, tid string) (Thread, error) {
	return s.updateThread(ctx, tid, "restore thread", s.refusePurging, func(t *Thread, b *pebble.Batch) bool {
		if !t.Deleted {
			return false
		}
		_ = b.Delete(deletionKey(KindThread, indexTS(t.DeletedTS), tid), nil)
		_ = b.Set(liveThreadKey(tid), nil, nil)
		t.Deleted, t.DeletedTS, t.UpdatedTS = false, 0, s.now().UnixNano()
		return true
	})
}

// SetTitle changes a live thread's title. ErrNotFound when the thread is
// absent or soft-deleted (a deleted thread takes no changes, as it takes
// no messages); ErrLegalHold while it is under legal hold: a title keeps
// no versions, so a change would lose the one the hold must keep. The
// same title again changes nothing (updated_ts included).
func (s *Store) SetTitle(ctx context.Context, tid, title string) (Thread, error) {
	var refused error
	t, err := s.updateThread(ctx, tid, "set title of thread", nil, func(t *Thread, _ *pebble.Batch) bool {
		switch {
		case t.Deleted:
			refused = fmt.Errorf("thread %s is deleted: %w", tid, ErrNotFound)
		case t.LegalHold:
			refused = fmt.Errorf("thread %s is %w: its title is kept as it is until the hold is released", tid, ErrLegalHold)
		case t.Unreadable:
			refused = fmt.Errorf("thread %s: %w: its creator's key is gone", tid, ErrUnreadable)
		case t.Title != title:
			// Sealed again (writeThread) under the creator's key.
			t.Title, t.UpdatedTS, t.Sealed = title, s.now().UnixNano(), ""
			return true
		}
		return false
	})
	if err == nil && refused != nil {
		return Thread{}, refused
	}
	return t, err
}

// SetLegalHold sets or clears the legal hold flag. A thread whose purge has
// begun, or one of whose messages is past its claim's re-check (claims.go),
// can no longer be held: ErrPurgeInProgress.
func (s *Store) SetLegalHold(ctx context.Context, tid string, hold bool) (Thread, error) {
	refuse := func(ctx context.Context, tid, op string) error {
		if err := s.refusePurging(ctx, tid, op); err != nil || !hold {
			return err
		}
		return s.refuseConfirmed(ctx, tid, op)
	}
	return s.updateThread(ctx, tid, "legal hold on thread", refuse, func(t *Thread, _ *pebble.Batch) bool {
		if t.LegalHold == hold {
			return false
		}
		t.LegalHold, t.UpdatedTS = hold, s.now().UnixNano()
		return true
	})
}

// updateThread is the read-check-write of a thread's metadata, under the
// thread's lock. change edits t, may add to the batch, and answers false
// when there is nothing to write (t is returned as it is). refuse, when
// set, may refuse the change first (under the lock).
func (s *Store) updateThread(ctx context.Context, tid, op string, refuse func(ctx context.Context, tid, op string) error,
	change func(t *Thread, b *pebble.Batch) bool) (Thread, error) {
	if err := ctx.Err(); err != nil {
		return Thread{}, err
	}
	if err := ValidateID(tid); err != nil {
		return Thread{}, err
	}
	h := s.hold(tid)
	defer h.release()

	if refuse != nil {
		if err := refuse(ctx, tid, op); err != nil {
			return Thread{}, err
		}
	}
	t, err := s.readThread(tid)
	if err != nil {
		return t, err
	}
	if err := s.openThread(ctx, &t); err != nil {
		return Thread{}, err
	}
	wasPlain := t.Sealed == ""
	b := s.db.NewBatch()
	if !change(&t, b) {
		_ = b.Close()
		return t, nil
	}
	if err := s.writeThread(ctx, b, &t); err != nil {
		_ = b.Close()
		return Thread{}, fmt.Errorf("%s %s: %w", op, tid, err)
	}
	if wasPlain && t.Sealed != "" {
		// Its plain metadata may still be in a file (design §6): a
		// shredded purge of the thread erases it all the same.
		_ = b.Set(plainMarkKey(tid), nil, nil)
	}
	if err := s.apply(ctx, write{kind: writeUser, batch: b, held: h, answer: answer{thread: &t}}); err != nil {
		return Thread{}, fmt.Errorf("%s %s: %w", op, tid, err)
	}
	return t, nil
}

// ListThreads lists threads in key order (thread ID order, with an ID
// sorting before its extensions by a letter and after those by '-', '.' or a
// digit). The cursor holds the last ID returned (ThreadCursor). Malformed
// metadata is skipped.
// Without IncludeDeleted it walks the live-thread index, so a page costs
// the same however many deleted threads lie between live ones.
func (s *Store) ListThreads(ctx context.Context, o ListOptions) ([]Thread, string, error) {
	limit, err := o.limit()
	if err != nil {
		return nil, "", err
	}
	after := ""
	if o.Cursor != "" {
		if after, err = ThreadCursorID(o.Cursor); err != nil {
			return nil, "", err
		}
	}
	if !o.IncludeDeleted {
		return s.listLiveThreads(ctx, after, limit)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte(threadNS),
		UpperBound: upperBound([]byte(threadNS)),
	})
	if err != nil {
		return nil, "", fmt.Errorf("list threads: %w", err)
	}
	defer it.Close()

	var out []Thread
	var pos bool
	if after == "" {
		pos = it.First()
	} else {
		pos = it.SeekGE(threadEnd(after))
	}
	for pos {
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
		tid, _, ok := parseThreadKey(it.Key())
		if !ok {
			pos = it.Next() // not a thread key: step over it
			continue
		}
		if t, ok := listedThread(it, tid); ok {
			if len(out) == limit {
				// Another thread follows the full page: hand out a cursor.
				return out, ThreadCursor(out[len(out)-1].ID), nil
			}
			if err := s.openThread(ctx, &t); err != nil {
				return nil, "", err
			}
			out = append(out, t)
		}
		pos = it.SeekGE(threadEnd(tid))
	}
	if err := it.Error(); err != nil {
		return nil, "", fmt.Errorf("list threads: %w", err)
	}
	return out, "", nil
}

// listLiveThreads pages through the live-thread index, reading each
// thread's metadata from one snapshot so that the page is consistent. An
// entry whose metadata is gone, malformed or deleted is skipped (the index
// is written in the same batch as the metadata, so that only happens to
// records edited outside the store).
func (s *Store) listLiveThreads(ctx context.Context, after string, limit int) ([]Thread, string, error) {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	it, err := snap.NewIter(&pebble.IterOptions{
		LowerBound: []byte(liveThreadNS),
		UpperBound: upperBound([]byte(liveThreadNS)),
	})
	if err != nil {
		return nil, "", fmt.Errorf("list threads: %w", err)
	}
	defer it.Close()

	var out []Thread
	pos := it.First()
	if after != "" {
		pos = it.SeekGE(liveThreadEnd(after))
	}
	for ; pos; pos = it.Next() {
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
		k := it.Key()
		if len(k) < len(liveThreadNS)+2 || k[len(k)-1] != ':' {
			continue
		}
		tid := string(k[len(liveThreadNS) : len(k)-1])
		if ValidateID(tid) != nil {
			continue
		}
		v, closer, err := snap.Get(threadMetaKey(tid))
		if errors.Is(err, pebble.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("list threads: read %s: %w", tid, err)
		}
		t, err := decodeThread(tid, v)
		_ = closer.Close()
		if err != nil || t.Deleted {
			continue
		}
		if len(out) == limit {
			return out, ThreadCursor(out[len(out)-1].ID), nil
		}
		if err := s.openThread(ctx, &t); err != nil {
			return nil, "", err
		}
		out = append(out, t)
	}
	if err := it.Error(); err != nil {
		return nil, "", fmt.Errorf("list threads: %w", err)
	}
	return out, "", nil
}

// listedThread reads tid's metadata at the iterator (which sits on one of
// the thread's keys) for a listing that includes deleted threads; malformed
// metadata is left out.
func listedThread(it *pebble.Iterator, tid string) (Thread, bool) {
	if ValidateID(tid) != nil {
		return Thread{}, false
	}
	meta := threadMetaKey(tid)
	if !it.SeekGE(meta) || string(it.Key()) != string(meta) {
		return Thread{}, false
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return Thread{}, false
	}
	t, err := decodeThread(tid, v)
	if err != nil {
		return Thread{}, false
	}
	return t, true
}

// LegalHolds returns every thread on legal hold, deleted or not, in thread
// ID order. Holds are rare and set by hand, so there is no index of them:
// this reads every thread's metadata once (one seek per thread), which is
// an operator's question, not a request path.
func (s *Store) LegalHolds(ctx context.Context) ([]Thread, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte(threadNS),
		UpperBound: upperBound([]byte(threadNS)),
	})
	if err != nil {
		return nil, fmt.Errorf("list legal holds: %w", err)
	}
	defer it.Close()
	var out []Thread
	for pos := it.First(); pos; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		tid, _, ok := parseThreadKey(it.Key())
		if !ok {
			pos = it.Next()
			continue
		}
		if t, ok := listedThread(it, tid); ok && t.LegalHold {
			if err := s.openThread(ctx, &t); err != nil {
				return nil, err
			}
			out = append(out, t)
		}
		pos = it.SeekGE(threadEnd(tid))
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("list legal holds: %w", err)
	}
	return out, nil
}
