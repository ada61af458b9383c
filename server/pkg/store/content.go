package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// ContentSink receives an item's content as stored, in order: the thread's
// metadata once, then for each message its ID and every version, oldest
// first. Sealed records (spec §12) are passed opened, in the plain shape:
// an export is the operator's archive of the content; one whose key is
// gone is passed as stored. The byte slices are valid only during the call: a sink writes or
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
	c, err := s.NewContentReader()
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Thread(ctx, tid, sink)
}

// ReadMessageContent streams message mid of thread tid: the thread's
// metadata for context (the thread itself stays), then every version.
func (s *Store) ReadMessageContent(ctx context.Context, tid, mid string, sink ContentSink) error {
	c, err := s.NewContentReader()
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Message(ctx, tid, mid, sink)
}

// ContentReader reads the content of many items from one snapshot through
// iterators it re-bounds per item: opening a snapshot and two iterators
// per item cost more than reading a small item. Not safe for concurrent
// use; Close it.
type ContentReader struct {
	s    *Store
	ctx  context.Context
	snap *pebble.Snapshot
	log  *pebble.Iterator // re-bounded to one thread's log
	vr   *versionReader
}

// NewContentReader opens a reader on a snapshot taken now.
func (s *Store) NewContentReader() (*ContentReader, error) {
	snap := s.db.NewSnapshot()
	log, err := snap.NewIter(&pebble.IterOptions{LowerBound: []byte(threadNS), UpperBound: upperBound([]byte(threadNS))})
	if err != nil {
		snap.Close()
		return nil, fmt.Errorf("open content reader: %w", err)
	}
	vr, err := newVersionReader(snap)
	if err != nil {
		log.Close()
		snap.Close()
		return nil, err
	}
	return &ContentReader{s: s, ctx: context.Background(), snap: snap, log: log, vr: vr}, nil
}

// Close releases the snapshot.
func (c *ContentReader) Close() error {
	return errors.Join(c.vr.close(), c.log.Close(), c.snap.Close())
}

// Thread streams thread tid (see ReadThreadContent).
func (c *ContentReader) Thread(ctx context.Context, tid string, sink ContentSink) error {
	if err := ValidateID(tid); err != nil {
		return err
	}
	c.ctx = ctx
	if err := c.meta(tid, sink); err != nil {
		return err
	}
	it := c.log
	it.SetBounds(logPrefix(tid), threadEnd(tid))
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
		if err := c.streamVersions(tid, mid, sink); err != nil {
			return fmt.Errorf("read thread %s: %w", tid, err)
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("read thread %s: %w", tid, err)
	}
	return ctx.Err()
}

// Message streams message mid of thread tid (see ReadMessageContent).
func (c *ContentReader) Message(ctx context.Context, tid, mid string, sink ContentSink) error {
	if err := validateIDs(tid, mid); err != nil {
		return err
	}
	c.ctx = ctx
	if err := c.meta(tid, sink); err != nil {
		return err
	}
	if err := c.streamVersions(tid, mid, sink); err != nil {
		return fmt.Errorf("read message %s: %w", mid, err)
	}
	return ctx.Err()
}

// ThreadMeta passes thread tid's metadata alone to sink, opened as
// Thread passes it (for the context of an item that is not a thread).
func (c *ContentReader) ThreadMeta(ctx context.Context, tid string, sink ContentSink) error {
	if err := ValidateID(tid); err != nil {
		return err
	}
	c.ctx = ctx
	return c.meta(tid, sink)
}

// meta passes the thread's stored metadata (nil when gone) to sink.
func (c *ContentReader) meta(tid string, sink ContentSink) error {
	meta, err := getFrom(c.snap, threadMetaKey(tid))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("read thread %s: %w", tid, err)
	}
	if meta != nil {
		if t, err := decodeThread(tid, meta); err == nil && t.Sealed != "" {
			if err := c.s.openThread(c.ctx, &t); err != nil {
				return err
			}
			if !t.Unreadable {
				t.Key, t.Sealed = 0, ""
				meta = appendThreadJSON(nil, t)
			}
		}
	}
	return sink.Thread(meta)
}

// opened returns a version as the sink gets it: a sealed one opened, in
// the plain shape.
func (c *ContentReader) opened(key, value []byte) ([]byte, error) {
	mid, version, ok := parseVersionKey(key)
	if !ok {
		return value, nil
	}
	m, err := decodeMessage(mid, version, value)
	if err != nil || m.Sealed == "" {
		return value, nil
	}
	if err := c.s.openMessage(c.ctx, &m); err != nil {
		return nil, err
	}
	if m.Unreadable {
		return value, nil
	}
	m.Key, m.Sealed = 0, ""
	return appendMessageJSON(nil, m), nil
}

// streamVersions passes mid's versions to sink when they belong to tid:
// a message of another thread behind a corrupt log entry is not this
// thread's content (and its purge leaves it alone). A message without
// versions is left out.
func (c *ContentReader) streamVersions(tid, mid string, sink ContentSink) error {
	it := c.vr.bound(mid)
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
		if value, err = c.opened(it.Key(), value); err != nil {
			return err
		}
		if err := sink.Version(value); err != nil {
			return err
		}
	}
	return it.Error()
}

// Attachments calls fn with the attachment records of message mid of
// thread tid, or of the whole thread when mid is "", from the reader's
// snapshot in key (upload) order, opened: a sealed one's content fields
// unsealed, Key and Sealed kept (its blob opens with them), or marked
// Unreadable when its key is gone. A record that does not decode is
// ErrMalformed.
func (c *ContentReader) Attachments(ctx context.Context, tid, mid string, fn func(Attachment) error) error {
	return scanAttachments(ctx, c.snap, tid, mid, func(a Attachment) error {
		if err := c.s.openAttachment(ctx, &a); err != nil {
			return err
		}
		return fn(a)
	})
}
