package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// ContentSink receives an item's content as stored, in order: the thread's
// metadata once, then for each message its ID and every version, oldest
// first. The byte slices are valid only during the call: a sink writes or
// copies them, so that content of any size passes through bounded memory.
type ContentSink interface {
	Thread(raw []byte) error // nil when the metadata is gone
	Message(mid string) error
	Version(raw []byte) error
}

// checkEvery is how many messages are streamed between context checks.
const checkEvery = 256

// ReadThreadContent streams everything of thread tid that PurgeThread
// deletes and a restore would need: its metadata and each message of its
// log, in log (creation) order, with all versions. It reads one snapshot of
// the database, holding one key and value in memory at a time. A thread
// that is gone (or part-purged) yields what is left.
func (s *Store) ReadThreadContent(ctx context.Context, tid string, sink ContentSink) error {
	if err := ValidateID(tid); err != nil {
		return err
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	meta, err := getFrom(snap, threadMetaKey(tid))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("read thread %s: %w", tid, err)
	}
	if err := sink.Thread(meta); err != nil {
		return err
	}

	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: logPrefix(tid), UpperBound: threadEnd(tid)})
	if err != nil {
		return fmt.Errorf("read thread %s: %w", tid, err)
	}
	defer it.Close()
	r, err := newVersionReader(snap)
	if err != nil {
		return err
	}
	defer r.close()
	prefix := threadPrefix(tid)
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		_, mid, ok := parseLogEntry(it.Key()[len(prefix):])
		if !ok {
			continue
		}
		if n++; n%checkEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err := streamVersions(r, tid, mid, sink); err != nil {
			return fmt.Errorf("read thread %s: %w", tid, err)
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("read thread %s: %w", tid, err)
	}
	return ctx.Err()
}

// ReadMessageContent streams message mid of thread tid: the thread's
// metadata for context (the thread itself stays), then every version.
func (s *Store) ReadMessageContent(ctx context.Context, tid, mid string, sink ContentSink) error {
	if err := validateIDs(tid, mid); err != nil {
		return err
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	meta, err := getFrom(snap, threadMetaKey(tid))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("read thread %s: %w", tid, err)
	}
	if err := sink.Thread(meta); err != nil {
		return err
	}
	r, err := newVersionReader(snap)
	if err != nil {
		return err
	}
	defer r.close()
	if err := streamVersions(r, tid, mid, sink); err != nil {
		return fmt.Errorf("read message %s: %w", mid, err)
	}
	return ctx.Err()
}

// streamVersions passes mid's versions to sink when they belong to tid:
// a message of another thread behind a corrupt log entry is not this
// thread's content (and its purge leaves it alone). A message without
// versions is left out.
func streamVersions(r *versionReader, tid, mid string, sink ContentSink) error {
	it := r.bound(mid)
	if !it.First() {
		return it.Error()
	}
	value, err := it.ValueAndErr()
	if err != nil {
		return fmt.Errorf("read %s: %w", it.Key(), err)
	}
	if h, ok := decodeHead(value); ok && h.Thread != tid {
		return nil
	}
	if err := sink.Message(mid); err != nil {
		return err
	}
	for valid := true; valid; valid = it.Next() {
		value, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("read %s: %w", it.Key(), err)
		}
		if err := sink.Version(value); err != nil {
			return err
		}
	}
	return it.Error()
}
