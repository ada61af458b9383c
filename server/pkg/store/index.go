package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/cockroachdb/pebble/v2"
)

// ErrStopScan ends ScanDeletionIndex early without error.
var ErrStopScan = errors.New("stop scan")

// ctxCheckEvery is how many keys long scans read between context checks.
const ctxCheckEvery = 1024

func checkKind(kind ItemKind) error {
	if kind != KindThread && kind != KindMessage {
		return fmt.Errorf("%w: item kind %q", ErrInvalidArgument, kind)
	}
	return nil
}

// ScanDeletionIndex calls fn for every index entry of kind with
// from <= DeletedTS <= to, in deletion-time order. It reads a snapshot, so fn
// may purge. Returning ErrStopScan from fn ends the scan without error.
// Index keys that cannot be parsed are skipped.
func (s *Store) ScanDeletionIndex(ctx context.Context, kind ItemKind, from, to int64, fn func(DeletionEntry) error) error {
	if err := checkKind(kind); err != nil {
		return err
	}
	err := scanByDeletionTime(ctx, s, deletionPrefix(kind), from, to, func(it *pebble.Iterator) (DeletionEntry, bool) {
		return deletionEntry(kind, it)
	}, fn)
	if err != nil {
		return fmt.Errorf("scan deletion index: %w", err)
	}
	return nil
}

// scanByDeletionTime calls fn, in deletion-time order, for every entry of
// a deletion index (prefix, then the padded time) with from <= time <= to
// that parse reads; entries it cannot read are skipped. An iterator reads
// the state as of its creation, so fn may delete what it is given.
// ErrStopScan from fn ends the scan without error.
func scanByDeletionTime[T any](ctx context.Context, s *Store, prefix []byte, from, to int64, parse func(*pebble.Iterator) (T, bool), fn func(T) error) error {
	from = max(from, 0)
	if to < from {
		return nil
	}
	lower := appendPadded(withRoom(prefix), from)
	upper := upperBound(prefix)
	if to < math.MaxInt64 {
		upper = appendPadded(withRoom(prefix), to+1)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	defer it.Close()
	for n, valid := 0, it.First(); valid; n, valid = n+1, it.Next() {
		if n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		e, ok := parse(it)
		if !ok {
			continue
		}
		if err := fn(e); err != nil {
			if errors.Is(err, ErrStopScan) {
				return nil
			}
			return err
		}
	}
	return it.Error()
}

// withRoom copies a prefix so appending to it cannot touch the original.
func withRoom(p []byte) []byte { return append(make([]byte, 0, len(p)+padWidth+1), p...) }

// deletionEntry parses the index entry at the iterator.
func deletionEntry(kind ItemKind, it *pebble.Iterator) (DeletionEntry, bool) {
	ts, id, ok := parseDeletionKey(kind, it.Key())
	if !ok {
		return DeletionEntry{}, false
	}
	e := DeletionEntry{Kind: kind, ID: id, ThreadID: id, DeletedTS: ts}
	if kind == KindMessage {
		v, err := it.ValueAndErr()
		if err != nil || ValidateID(string(v)) != nil {
			return DeletionEntry{}, false
		}
		e.ThreadID = string(v)
	}
	return e, true
}

// RebuildDeletionIndex drops and rebuilds the deletion index (soft-deleted
// attachments' entries included), the
// live-thread index and the live-message indexes (age, counts) from a full
// scan; records that cannot be decoded are
// indexed at time 0 so retention reports them (and are not listed). Returns
// the number of deletion index entries written. It holds every thread
// lock, so it runs alone with respect to writes.
func (s *Store) RebuildDeletionIndex(ctx context.Context) (int, error) {
	h := s.holdAll()
	defer h.release()

	w := newIndexWriter(ctx, s)
	w.under = h
	defer w.close()
	// The drop and the first entries may be in different batches: sys:schema
	// is only written at the end, so a crash means a rebuild at next open.
	_ = w.b.DeleteRange([]byte(delIndexNS), upperBound([]byte(delIndexNS)), nil)
	_ = w.b.DeleteRange([]byte(liveThreadNS), upperBound([]byte(liveThreadNS)), nil)
	_ = w.b.DeleteRange([]byte(ageNS), upperBound([]byte(ageNS)), nil)
	_ = w.b.DeleteRange([]byte(countNS), upperBound([]byte(countNS)), nil)

	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte(threadNS),
		UpperBound: upperBound([]byte(threadNS)),
	})
	if err != nil {
		return 0, fmt.Errorf("rebuild deletion index: %w", err)
	}
	defer it.Close()
	r, err := newVersionReader(s.db)
	if err != nil {
		return 0, err
	}
	defer r.close()

	// Live counts are summed per thread; a thread's keys are contiguous.
	var cur threadCount
	for n, valid := 0, it.First(); valid; n, valid = n+1, it.Next() {
		if n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return w.count, err
			}
		}
		tid, rest, ok := parseThreadKey(it.Key())
		if !ok || ValidateID(tid) != nil {
			continue
		}
		if tid != cur.tid {
			if err := w.setCount(cur); err != nil {
				return w.count, err
			}
			cur = threadCount{tid: tid}
		}
		switch {
		case string(rest) == countSuffix:
			cur.stored = true
		case string(rest) == metaSuffix:
			value, err := it.ValueAndErr()
			if err != nil {
				return w.count, fmt.Errorf("rebuild deletion index: %w", err)
			}
			t, err := decodeThread(tid, value)
			if err != nil {
				err = w.add(KindThread, 0, tid, nil)
			} else if t.Deleted {
				err = w.add(KindThread, t.DeletedTS, tid, nil)
			} else {
				err = w.addLive(tid)
			}
			if err != nil {
				return w.count, err
			}
		case isAttachmentKey(rest):
			value, err := it.ValueAndErr()
			if err != nil {
				return w.count, fmt.Errorf("rebuild deletion index: %w", err)
			}
			if err := w.addAttachment(tid, rest, value); err != nil {
				return w.count, err
			}
		case len(rest) > len(logSuffix) && string(rest[:len(logSuffix)]) == logSuffix:
			_, mid, ok := parseLogSuffix(rest[len(logSuffix):])
			if !ok {
				continue
			}
			live, err := s.indexMessage(w, r, tid, mid)
			if err != nil {
				return w.count, err
			}
			if live {
				cur.n++
			}
		}
	}
	if err := it.Error(); err != nil {
		return w.count, fmt.Errorf("rebuild deletion index: %w", err)
	}
	if err := w.setCount(cur); err != nil {
		return w.count, err
	}
	_ = w.b.Set([]byte(schemaKey), []byte(schemaVersion), nil)
	if err := w.commit(true); err != nil {
		return w.count, err
	}
	return w.count, nil
}

// indexMessage adds mid's deletion index entry when its latest version is
// a tombstone (or cannot be read, so retention reports it), and its age
// entry when it is live and unclaimed; it reports the latter.
func (s *Store) indexMessage(w *indexWriter, r *versionReader, tid, mid string) (live bool, err error) {
	m, err := r.latestMessage(mid)
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case errors.Is(err, ErrMalformed):
		return false, w.add(KindMessage, 0, mid, []byte(tid))
	case err != nil:
		return false, err
	case m.Thread != tid:
		return false, nil
	case m.Deleted:
		return false, w.add(KindMessage, m.DeletedTS, mid, []byte(tid))
	}
	if claimed, err := s.purgeStarted(KindMessage, mid); err != nil || claimed {
		return false, err
	}
	created, err := r.created(mid)
	if err != nil {
		return false, nil // an unreadable first version: not indexed by age
	}
	w.key = appendAgeKey(w.key[:0], created, mid)
	_ = w.b.Set(w.key, []byte(tid), nil)
	return true, w.flushFull()
}

// threadCount is one thread's live messages during a rebuild.
type threadCount struct {
	tid    string
	n      int64
	stored bool // the thread has a count key to replace or remove
}

// setCount writes a rebuilt count and its index entry, or removes a
// count key the thread no longer needs.
func (w *indexWriter) setCount(c threadCount) error {
	switch {
	case c.tid == "":
		return nil
	case c.n > 0:
		_ = w.b.Set(countKey(c.tid), strconv.AppendInt(nil, c.n, 10), nil)
		_ = w.b.Set(countIndexKey(c.n, c.tid), nil, nil)
	case c.stored:
		_ = w.b.Delete(countKey(c.tid), nil)
	}
	return w.flushFull()
}

// indexWriter writes index entries in unsynced batches of indexBatchKeys.
type indexWriter struct {
	ctx   context.Context
	s     *Store
	b     *pebble.Batch
	key   []byte
	count int
	// under is the stripes a rebuild holds (write.under); nil for one
	// that holds none.
	under *held
}

const indexBatchKeys = 10_000

func newIndexWriter(ctx context.Context, s *Store) *indexWriter {
	return &indexWriter{ctx: ctx, s: s, b: s.db.NewBatch()}
}

func (w *indexWriter) add(kind ItemKind, deletedTS int64, id string, value []byte) error {
	w.key = appendDeletionKey(w.key[:0], kind, indexTS(deletedTS), id)
	_ = w.b.Set(w.key, value, nil)
	w.count++
	return w.flushFull()
}

// addAttachment adds the deletion index entry of a soft-deleted
// attachment (rest: att:<mid>:<aid>). A record that does not decode is
// left to its thread's purge, which deletes it.
func (w *indexWriter) addAttachment(tid string, rest, value []byte) error {
	ids := bytes.SplitN(rest[len(attSuffix):], []byte{':'}, 2)
	if len(ids) != 2 {
		return nil
	}
	a, err := decodeAttachment(tid, string(ids[0]), string(ids[1]), value)
	if err != nil || !a.Deleted {
		return nil
	}
	w.key = appendAttachmentDeletionKey(w.key[:0], a.DeletedTS, a.Thread, a.Message, a.ID)
	_ = w.b.Set(w.key, nil, nil)
	w.count++
	return w.flushFull()
}

// addLive adds a live-thread index entry; it is not counted.
func (w *indexWriter) addLive(tid string) error {
	_ = w.b.Set(liveThreadKey(tid), nil, nil)
	return w.flushFull()
}

func (w *indexWriter) flushFull() error {
	if w.b.Count() < indexBatchKeys {
		return nil
	}
	return w.commit(false)
}

// commit applies the batch and starts the next.
func (w *indexWriter) commit(sync bool) error {
	err := w.s.apply(w.ctx, write{kind: writeIndex, batch: w.b, sync: sync, under: w.under})
	w.b = w.s.db.NewBatch() // apply took the last one
	if err != nil {
		return fmt.Errorf("rebuild deletion index: %w", err)
	}
	return nil
}

func (w *indexWriter) close() { _ = w.b.Close() }

// StampDeletion gives a deleted item that has no usable deleted_ts the time
// ts (legacy data), moving its index entry, and writes a StampMarker for run
// runID in the same synced batch. ErrNotEligible if it is no longer deleted
// or already has a deleted_ts.
func (s *Store) StampDeletion(ctx context.Context, e DeletionEntry, ts int64, runID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkKind(e.Kind); err != nil {
		return err
	}
	if ts <= 0 {
		return fmt.Errorf("%w: stamp time %d", ErrInvalidArgument, ts)
	}
	if e.Kind == KindThread && e.ThreadID == "" {
		e.ThreadID = e.ID
	}
	if err := validateIDs(e.ID, e.ThreadID); err != nil {
		return err
	}
	h := s.hold(e.ThreadID)
	defer h.release()

	b := s.db.NewBatch()
	var err error
	if e.Kind == KindThread {
		err = s.stampThread(b, e.ID, ts)
	} else {
		err = s.stampMessage(b, e.ThreadID, e.ID, ts)
	}
	if err != nil {
		_ = b.Close()
		return err
	}
	v, err := encode(StampMarker{Kind: e.Kind, ID: e.ID, ThreadID: e.ThreadID, DeletedTS: ts, RunID: runID})
	if err != nil {
		_ = b.Close()
		return err
	}
	_ = b.Set(stampKey(e.Kind, e.ID), v, nil)
	if err := s.apply(ctx, write{kind: writeState, batch: b, sync: true, under: h}); err != nil {
		return fmt.Errorf("stamp %s %s: %w", e.Kind, e.ID, err)
	}
	return nil
}

func (s *Store) stampThread(b *pebble.Batch, tid string, ts int64) error {
	t, err := s.readThread(tid)
	if err != nil {
		return fmt.Errorf("stamp thread %s: %w: %w", tid, ErrNotEligible, err)
	}
	if !t.Deleted || t.DeletedTS > 0 {
		return fmt.Errorf("stamp thread %s: %w: deleted=%t deleted_ts=%d", tid, ErrNotEligible, t.Deleted, t.DeletedTS)
	}
	_ = b.Delete(deletionKey(KindThread, indexTS(t.DeletedTS), tid), nil)
	_ = b.Set(deletionKey(KindThread, ts, tid), nil, nil)
	t.DeletedTS = ts
	putThreadRecord(b, t)
	return nil
}

// stampMessage rewrites the tombstone in place: a stamp is not a new
// version, only the start of the retention clock.
func (s *Store) stampMessage(b *pebble.Batch, tid, mid string, ts int64) error {
	m, err := s.readMessage(tid, mid)
	if err != nil {
		return fmt.Errorf("stamp message %s: %w: %w", mid, ErrNotEligible, err)
	}
	if !m.Deleted || m.DeletedTS > 0 {
		return fmt.Errorf("stamp message %s: %w: deleted=%t deleted_ts=%d", mid, ErrNotEligible, m.Deleted, m.DeletedTS)
	}
	_ = b.Delete(deletionKey(KindMessage, indexTS(m.DeletedTS), mid), nil)
	_ = b.Set(deletionKey(KindMessage, ts, mid), []byte(tid), nil)
	m.DeletedTS = ts
	putVersion(b, m) // the same version: its seal stays valid
	return nil
}

// PendingStamps lists stamp markers whose audit records may be missing.
// Markers that cannot be decoded are left out.
func (s *Store) PendingStamps(ctx context.Context) ([]StampMarker, error) {
	return pendingMarkers[StampMarker](ctx, s, "stamps", stampNS, stampKey)
}

// ClearStamps removes stamp markers (synced) once their audit records are durable.
func (s *Store) ClearStamps(ctx context.Context, ms []StampMarker) error {
	return clearMarkers(ctx, s, "stamp markers", stampKey, ms)
}
