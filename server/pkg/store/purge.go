package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

const defaultPurgeBatch = 1000

// PurgeThread deletes every key under thread:<tid>: and version:msg:<mid>:
// for each of its messages, plus their deletion-index entries, in batches of
// opts.BatchSize keys, metadata last. Idempotent. Returns the number of data
// keys deleted (index entries are bookkeeping and not counted). Batches are
// not synced; call Sync before relying on durability.
//
// It refuses (ErrNotEligible) a thread that is not soft-deleted or whose
// metadata cannot be read: live data and malformed records are never
// deleted. Callers start with BeginPurge, which stops writes to the thread
// that this purge's iterators could not see.
func (s *Store) PurgeThread(ctx context.Context, tid string, opts PurgeOptions) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := ValidateID(tid); err != nil {
		return 0, err
	}
	meta := threadMetaKey(tid)
	var indexKey []byte
	switch t, err := s.readThread(tid); {
	case errors.Is(err, ErrNotFound):
		// Absent, or metadata already gone: finish whatever is left.
	case err != nil:
		return 0, fmt.Errorf("purge thread %s: %w: %w", tid, ErrNotEligible, err)
	case !t.Deleted:
		return 0, fmt.Errorf("purge thread %s: %w: not deleted", tid, ErrNotEligible)
	default:
		indexKey = deletionKey(KindThread, indexTS(t.DeletedTS), tid)
	}

	if !opts.Shredded {
		opts.Erase.addThread(tid)
	} else if err := s.erasePlainMeta(tid, opts.Erase); err != nil {
		return 0, fmt.Errorf("purge thread %s: %w", tid, err)
	}
	prefix := threadPrefix(tid)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: threadEnd(tid)})
	if err != nil {
		return 0, fmt.Errorf("purge thread %s: %w", tid, err)
	}
	defer it.Close()
	r, err := newVersionReader(s.db)
	if err != nil {
		return 0, err
	}
	defer r.close()
	p := s.newPurger(ctx, opts)
	defer p.close()

	metaFound, policyFound := false, false
	var countIndex []byte
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		rest := key[len(prefix):]
		switch string(rest) {
		case metaSuffix:
			metaFound = true // deleted last, below
			continue
		case policySuffix:
			policyFound = true // deleted last with its index entry, below
			continue
		case countSuffix:
			// Deleted last with its index entry, which it locates. No
			// write reaches a thread whose purge has begun, so it holds.
			n, err := liveCount(s.db, tid)
			if err != nil {
				return p.deleted, fmt.Errorf("purge thread %s: %w", tid, err)
			}
			countIndex = countIndexKey(n, tid)
			continue
		}
		if _, mid, ok := parseLogEntry(rest); ok {
			if err := p.message(r, tid, mid, key); err != nil {
				return p.deleted, fmt.Errorf("purge thread %s: %w", tid, err)
			}
			continue
		}
		if isAttachmentKey(rest) {
			v, err := it.ValueAndErr()
			if err == nil {
				err = p.attachment(tid, key, v)
			}
			if err != nil {
				return p.deleted, fmt.Errorf("purge thread %s: %w", tid, err)
			}
			continue
		}
		// Any other key of the thread.
		if err := p.room(1); err != nil {
			return p.deleted, fmt.Errorf("purge thread %s: %w", tid, err)
		}
		p.del(key, true)
	}
	if err := it.Error(); err != nil {
		return p.deleted, fmt.Errorf("purge thread %s: %w", tid, err)
	}

	// The metadata and the index entries go in the very last batch: until
	// it commits, the thread is still found, and the next run finishes it.
	// A deleted thread has no live-thread entry; deleting it anyway keeps
	// that index exact whatever wrote the metadata. A retention override
	// goes with its entry in the override index.
	if metaFound || indexKey != nil || policyFound || countIndex != nil {
		if err := p.room(7); err != nil {
			return p.deleted, fmt.Errorf("purge thread %s: %w", tid, err)
		}
		if countIndex != nil {
			p.del(countKey(tid), true) // a key of the thread, like its override
			p.del(countIndex, false)
		}
		if policyFound {
			p.del(policyKey(tid), true)
			p.del(policyIndexKey(tid), false)
		}
		if metaFound {
			p.del(meta, true)
			p.del(liveThreadKey(tid), false)
		}
		if indexKey != nil {
			p.del(indexKey, false)
		}
	}
	if err := p.flush(); err != nil {
		return p.deleted, fmt.Errorf("purge thread %s: %w", tid, err)
	}
	return p.deleted, nil
}

// parseLogEntry reads the tail of a thread key as a log entry.
func parseLogEntry(rest []byte) (created int64, mid string, ok bool) {
	if len(rest) <= len(logSuffix) || string(rest[:len(logSuffix)]) != logSuffix {
		return 0, "", false
	}
	return parseLogSuffix(rest[len(logSuffix):])
}

// PurgeMessage deletes one message's versions, its log entry and its index
// entry, in batches. Idempotent. Returns the number of data keys deleted.
// It refuses (ErrNotEligible) a message whose latest version is not a
// tombstone of thread tid, or cannot be read.
func (s *Store) PurgeMessage(ctx context.Context, tid, mid string, opts PurgeOptions) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := validateIDs(tid, mid); err != nil {
		return 0, err
	}
	r, err := newVersionReader(s.db)
	if err != nil {
		return 0, err
	}
	defer r.close()

	switch m, err := r.latestMessage(mid); {
	case errors.Is(err, ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("purge message %s: %w: %w", mid, ErrNotEligible, err)
	case m.Thread != tid:
		return 0, fmt.Errorf("purge message %s: %w: belongs to thread %s", mid, ErrNotEligible, m.Thread)
	case !m.Deleted:
		// A live message is purged only once a policy purge claimed it.
		if claimed, err := s.policyClaim(mid); err != nil || !claimed {
			return 0, fmt.Errorf("purge message %s: %w: not deleted (%v)", mid, ErrNotEligible, err)
		}
	}

	p := s.newPurger(ctx, opts)
	defer p.close()
	if err := p.purgeAttachments(tid, mid); err != nil {
		return p.deleted, fmt.Errorf("purge message %s: %w", mid, err)
	}
	if err := p.message(r, tid, mid, nil); err != nil {
		return p.deleted, fmt.Errorf("purge message %s: %w", mid, err)
	}
	if err := p.flush(); err != nil {
		return p.deleted, fmt.Errorf("purge message %s: %w", mid, err)
	}
	return p.deleted, nil
}

// purger deletes keys in batches of size, committing unsynced: a purge is
// idempotent, so a lost batch is redone by the next run, and one Sync at the
// end makes it durable before the audit record says "purged".
type purger struct {
	ctx      context.Context
	s        *Store // applies each batch (commit.go)
	db       *pebble.DB
	b        *pebble.Batch
	before   func(context.Context) error
	limit    func() int
	size     int // BatchSize
	batchCap int // keys the current batch may hold: size, or less by limit
	pending  int // data keys in b
	deleted  int // data keys committed
	erase    *EraseSpans
	shredded bool        // PurgeOptions.Shredded
	marker   PurgeMarker // PurgeOptions.Marker
	// owedBlobs counts the attachment blobs whose deletion this purge owes
	// (owedblobs.go).
	owedBlobs int

	first, last, lastValue []byte // reused buffers
}

func (s *Store) newPurger(ctx context.Context, opts PurgeOptions) *purger {
	size := opts.BatchSize
	if size <= 0 {
		size = defaultPurgeBatch
	}
	p := &purger{ctx: ctx, s: s, db: s.db, b: s.db.NewBatch(), before: opts.BeforeBatch, limit: opts.BatchLimit, size: size,
		erase: opts.Erase, shredded: opts.Shredded, marker: opts.Marker}
	p.setCap()
	return p
}

// setCap sizes the batch about to fill.
func (p *purger) setCap() {
	p.batchCap = p.size
	if p.limit != nil {
		if n := p.limit(); n > 0 && n < p.batchCap {
			p.batchCap = n
		}
	}
}

func (p *purger) close() { _ = p.b.Close() }

// del adds a delete; data says whether the key counts as deleted data.
func (p *purger) del(key []byte, data bool) {
	_ = p.b.Delete(key, nil)
	if data {
		p.pending++
	}
}

// room commits the current batch if n more keys would overflow it. Groups
// larger than a batch stay whole: their atomicity matters more.
func (p *purger) room(n int) error {
	if int(p.b.Count())+n <= p.batchCap {
		return nil
	}
	return p.flush()
}

func (p *purger) flush() error {
	if p.b.Count() == 0 {
		return nil
	}
	if p.before != nil {
		if err := p.before(p.ctx); err != nil {
			return fmt.Errorf("stopped before batch: %w", err)
		}
	}
	if err := p.ctx.Err(); err != nil {
		return fmt.Errorf("stopped before batch: %w", err)
	}
	err := p.s.apply(p.ctx, write{kind: writePurge, batch: p.b})
	p.b = p.db.NewBatch() // apply took the last one
	if err != nil {
		return fmt.Errorf("delete batch: %w", err)
	}
	p.deleted += p.pending
	p.pending = 0
	p.setCap()
	return nil
}

// message deletes mid's versions, oldest first, then, in one batch, its
// oldest and newest versions with its index entry and its log entry (logKey,
// or found from the oldest version when nil). Until that batch commits, the
// two versions those keys are computed from are still there, so the next
// run finishes an interrupted purge with nothing left behind. One forward
// pass: the newest version is known when the iterator runs out.
func (p *purger) message(r *versionReader, tid, mid string, logKey []byte) error {
	if !p.shredded {
		p.erase.addMessage(mid)
	}
	it := r.bound(mid)
	if !it.First() {
		if err := it.Error(); err != nil {
			return err
		}
		return p.dropLogEntry(logKey) // versions already gone
	}
	value, err := it.ValueAndErr()
	if err != nil {
		return fmt.Errorf("read %s: %w", it.Key(), err)
	}
	first, firstOK := decodeHead(value)
	if firstOK && first.Thread != tid {
		// Another thread's message behind a corrupt log entry: drop only
		// the entry, which is ours.
		return p.dropLogEntry(logKey)
	}
	if logKey == nil && firstOK {
		if logKey, err = p.existingLogKey(tid, first.TS, mid); err != nil {
			return err
		}
	}
	p.first = append(p.first[:0], it.Key()...)
	p.last = append(p.last[:0], p.first...)
	p.lastValue = append(p.lastValue[:0], value...)
	plainSeen := p.shredded && !isSealed(value)
	for n := 1; it.Next(); n++ {
		if n > 1 {
			// The previous newest is a middle version after all.
			if err := p.room(1); err != nil {
				return err
			}
			p.del(p.last, true)
		}
		value, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("read %s: %w", it.Key(), err)
		}
		p.last = append(p.last[:0], it.Key()...)
		p.lastValue = append(p.lastValue[:0], value...)
		if p.shredded && !plainSeen && !isSealed(value) {
			plainSeen = true
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	if plainSeen {
		// Content of before sealing: its keys cannot be shredded.
		p.erase.addMessage(mid)
	}

	last, lastOK := first, firstOK
	if string(p.last) != string(p.first) {
		last, lastOK = decodeHead(p.lastValue)
	}
	var indexKey, liveKey, keyIndex []byte
	if firstOK && first.Key != 0 {
		keyIndex = keyIndexKey(tid, first.Key, mid)
	}
	if !lastOK {
		indexKey = deletionKey(KindMessage, 0, mid) // where the rebuild put it
	} else if last.Deleted {
		indexKey = deletionKey(KindMessage, indexTS(last.DeletedTS), mid)
	} else if firstOK {
		// A live message (a thread's purge, or a policy purge, which has
		// already taken it out of the counts): its age entry goes too.
		liveKey = ageKey(first.TS, mid)
	}
	n := 5
	if keyIndex != nil {
		n++
	}
	if err := p.room(n); err != nil {
		return err
	}
	if liveKey != nil {
		p.del(liveKey, false)
	}
	if keyIndex != nil {
		p.del(keyIndex, false)
	}
	if string(p.first) != string(p.last) {
		p.del(p.first, true)
	}
	p.del(p.last, true)
	if indexKey != nil {
		p.del(indexKey, false)
	}
	if logKey != nil {
		p.del(logKey, true)
	}
	return nil
}

func (p *purger) dropLogEntry(logKey []byte) error {
	if logKey == nil {
		return nil
	}
	if err := p.room(1); err != nil {
		return err
	}
	p.del(logKey, true)
	return nil
}

// existingLogKey returns the log entry of a message created at created, or
// nil when it is already gone.
func (p *purger) existingLogKey(tid string, created int64, mid string) ([]byte, error) {
	key := logKey(tid, created, mid)
	found, err := hasKey(p.db, key)
	if err != nil || !found {
		return nil, err
	}
	return key, nil
}

// versionHead is the part of a stored version a purge needs.
type versionHead struct {
	Thread    string `json:"thread"`
	TS        int64  `json:"ts"`
	Deleted   bool   `json:"deleted"`
	DeletedTS int64  `json:"deleted_ts"`
	// Key is the key number of a sealed version (0: plain).
	Key uint32 `json:"key"`
}

func decodeHead(data []byte) (versionHead, bool) {
	if h, ok := fastHead(data); ok {
		return h, true
	}
	var h versionHead
	if json.Unmarshal(data, &h) != nil || h.Thread == "" {
		return versionHead{}, false
	}
	return h, true
}

// BeginPurge re-checks, under the thread's lock, that the item is still
// soft-deleted with deleted_ts == m.DeletedTS and that neither it nor its
// thread is on legal hold, then writes the purge marker. ErrNotEligible
// otherwise. From then on restore answers ErrPurgeInProgress.
//
// The marker is not synced on its own: every delete of the purge is
// committed after it, and Pebble recovers its log in order (a log is synced
// before the next one is used), so no delete can survive a crash without
// the marker. The Sync that precedes the item's audit record makes both
// durable. One sync per item was the largest cost of purging many small
// threads.
func (s *Store) BeginPurge(ctx context.Context, m PurgeMarker) error {
	return s.BeginPurgeChecked(ctx, m, nil)
}

// BeginPurgeChecked is BeginPurge with the caller's re-check of a thread
// claim (claims.go): keep, when set, is given the thread's override under
// the same lock, and a reason it returns refuses the claim with
// ErrClaimReleased, no marker written. A thread claim needs no later
// confirmation: from its marker on, holds and overrides of the thread are
// refused.
func (s *Store) BeginPurgeChecked(ctx context.Context, m PurgeMarker, keep func(ClaimState) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkKind(m.Kind); err != nil {
		return err
	}
	if m.Kind == KindThread {
		if m.ThreadID == "" {
			m.ThreadID = m.ID
		}
		if m.ThreadID != m.ID {
			return fmt.Errorf("%w: thread marker %s names thread %s", ErrInvalidArgument, m.ID, m.ThreadID)
		}
	}
	if err := validateIDs(m.ID, m.ThreadID); err != nil {
		return err
	}
	if m.DeletedTS <= 0 {
		// Never purge on sight what has no deletion time (spec §3).
		return fmt.Errorf("begin purge of %s %s: %w: no deletion time", m.Kind, m.ID, ErrNotEligible)
	}
	h := s.hold(m.ThreadID)
	defer h.release()

	if err := s.stillEligible(m); err != nil {
		return fmt.Errorf("begin purge of %s %s: %w", m.Kind, m.ID, err)
	}
	if keep != nil {
		st, err := s.claimState(m)
		if err != nil {
			return fmt.Errorf("begin purge of %s %s: %w", m.Kind, m.ID, err)
		}
		if why := keep(st); why != nil {
			return fmt.Errorf("%w: %w", ErrClaimReleased, why)
		}
	}
	if m.StartedAt == 0 {
		m.StartedAt = s.now().UnixNano()
	}
	v, err := encode(m)
	if err != nil {
		return err
	}
	if err := s.setUnder(ctx, h, purgeKey(m.Kind, m.ID), v, false); err != nil {
		return fmt.Errorf("begin purge of %s %s: %w", m.Kind, m.ID, err)
	}
	return nil
}

// stillEligible checks the item against the marker; the caller holds the
// thread's lock.
func (s *Store) stillEligible(m PurgeMarker) error {
	if m.Kind == KindThread {
		t, err := s.readThread(m.ID)
		switch {
		case err != nil:
			return fmt.Errorf("%w: %w", ErrNotEligible, err)
		case !t.Deleted:
			return fmt.Errorf("%w: restored", ErrNotEligible)
		case t.LegalHold:
			return fmt.Errorf("%w: on legal hold", ErrNotEligible)
		case t.DeletedTS != m.DeletedTS:
			return fmt.Errorf("%w: deleted_ts is %d, not %d", ErrNotEligible, t.DeletedTS, m.DeletedTS)
		}
		return nil
	}
	msg, err := s.readMessage(m.ThreadID, m.ID)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", ErrNotEligible, err)
	case !msg.Deleted:
		return fmt.Errorf("%w: restored", ErrNotEligible)
	case msg.DeletedTS != m.DeletedTS:
		return fmt.Errorf("%w: deleted_ts is %d, not %d", ErrNotEligible, msg.DeletedTS, m.DeletedTS)
	}
	// A hold on the thread covers its messages. The runner checked it when
	// it found the message, but a hold set since then must win: SetLegalHold
	// takes this same lock, so it either lands before this read or finds
	// nothing left to protect.
	t, err := s.readThread(m.ThreadID)
	switch {
	case errors.Is(err, ErrNotFound):
		// A thread purged before its message: nothing holds the message.
	case err != nil:
		return fmt.Errorf("%w: thread: %w", ErrNotEligible, err)
	case t.LegalHold:
		return fmt.Errorf("%w: thread on legal hold", ErrNotEligible)
	}
	return nil
}

// PendingPurges lists purge markers left by earlier (possibly crashed) runs.
// Markers that cannot be decoded are left out.
func (s *Store) PendingPurges(ctx context.Context) ([]PurgeMarker, error) {
	return pendingMarkers[PurgeMarker](ctx, s, "purges", purgeNS, purgeKey)
}

// ClearPurges removes purge markers (synced) once their audit records are durable.
func (s *Store) ClearPurges(ctx context.Context, ms []PurgeMarker) error {
	return clearMarkers(ctx, s, "purge markers", purgeKey, ms)
}

// ItemExists reports whether any key of the item remains (thread: any key
// under thread:<id>:; message: any version key).
func (s *Store) ItemExists(ctx context.Context, kind ItemKind, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := checkKind(kind); err != nil {
		return false, err
	}
	if err := ValidateID(id); err != nil {
		return false, err
	}
	if kind == KindThread {
		return s.hasRange(threadPrefix(id), threadEnd(id))
	}
	return s.hasRange(versionPrefix(id), versionEnd(id))
}

// isSealed reports whether a stored version is sealed (seal.go).
func isSealed(value []byte) bool {
	h, ok := fastHead(value)
	return ok && h.Key != 0
}

// erasePlainMeta adds the thread's span to e when its metadata is plain,
// or was before it was sealed (plainMarkKey): a shredded thread's plain
// title and author (written before sealing) still need the erase step.
func (s *Store) erasePlainMeta(tid string, e *EraseSpans) error {
	v, err := s.get(threadMetaKey(tid))
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if t, err := decodeThread(tid, v); err != nil || t.Sealed == "" {
		e.addThread(tid)
		return nil
	}
	if wasPlain, err := s.has(plainMarkKey(tid)); err != nil {
		return err
	} else if wasPlain {
		e.addThread(tid)
	}
	return nil
}

// OweShred records, synced, that the purge of thread m.ID is about to
// destroy the thread's data keys (spec §12, design §6 step 1): the item's
// record is owed (its marker is durable, with Shredded set) before any key
// goes, so a crash after the keys went finishes the purge and records it
// shredded.
func (s *Store) OweShred(ctx context.Context, m PurgeMarker) (PurgeMarker, error) {
	if err := checkKind(m.Kind); err != nil {
		return m, err
	}
	if m.Kind != KindThread {
		return m, fmt.Errorf("%w: only a thread purge shreds", ErrInvalidArgument)
	}
	if m.Shredded {
		return m, nil
	}
	m.Shredded = true
	v, err := encode(m)
	if err != nil {
		return m, err
	}
	if err := s.set(ctx, purgeKey(m.Kind, m.ID), v, true); err != nil {
		return m, fmt.Errorf("owe the shredded record of thread %s: %w", m.ID, err)
	}
	return m, nil
}
