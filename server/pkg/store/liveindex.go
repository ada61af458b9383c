package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/cockroachdb/pebble/v2"
)

// Indexes of live messages, for the retention policies max_age and
// max_messages (spec §3.1). A message is live while its latest version is
// not a tombstone and no policy purge has claimed it. Every write that
// changes that (append, delete, restore, claim, purge) updates them in its
// own batch, under the thread's lock, so they stay exact:
//
//	idx:age:<created 20d>:<mid> → tid   live messages by creation time
//	thread:<tid>:count          → n     the thread's live messages (n > 0)
//	idx:cnt:<n 20d>:<tid>               threads by live-message count
//
// A run reads idx:age up to its cutoff and idx:cnt above its cap, so what
// it reads grows with what is due, not with the database.
const (
	ageNS       = "idx:age:"
	countNS     = "idx:cnt:"
	countSuffix = "count"
)

func appendAgeKey(b []byte, created int64, mid string) []byte {
	b = append(b, ageNS...)
	b = appendPadded(b, created)
	b = append(b, ':')
	return append(b, mid...)
}

func ageKey(created int64, mid string) []byte { return appendAgeKey(nil, created, mid) }

func countKey(tid string) []byte {
	return append(appendThreadPrefix(threadKeyBuf(tid, len(countSuffix)), tid), countSuffix...)
}

func countIndexKey(n int64, tid string) []byte { return appendCountIndexKey(nil, n, tid) }

func appendCountIndexKey(b []byte, n int64, tid string) []byte {
	b = append(b, countNS...)
	b = appendPadded(b, n)
	b = append(b, ':')
	return append(b, tid...)
}

// liveCount reads a thread's live-message count (0 when it has none). The
// value is read in place: every append reads it.
func liveCount(r pebble.Reader, tid string) (int64, error) {
	v, closer, err := r.Get(countKey(tid))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the live count of thread %s: %w", tid, err)
	}
	defer closer.Close()
	n, ok := parseCount(v)
	if !ok {
		return 0, fmt.Errorf("live count of thread %s: %w: %q", tid, ErrMalformed, v)
	}
	return n, nil
}

// parseCount reads a count as strconv.AppendInt writes it: decimal digits,
// no sign, within int64.
func parseCount(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 19 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, n >= 0
}

// setLiveCount moves a thread from count from to count to in b. Its keys
// and value are built one after the other in one buffer (the batch copies
// them), since every append and delete of a message comes here.
func setLiveCount(b *pebble.Batch, tid string, from, to int64) {
	if from == to {
		return
	}
	buf := make([]byte, 0, len(countNS)+padWidth+len(threadNS)+2*len(tid)+len(countSuffix)+24)
	if from > 0 {
		_ = b.Delete(appendCountIndexKey(buf, from, tid), nil)
	}
	if to > 0 {
		kv := append(appendThreadPrefix(buf, tid), countSuffix...)
		k := len(kv)
		kv = strconv.AppendInt(kv, to, 10)
		_ = b.Set(kv[:k], kv[k:], nil)
		_ = b.Set(appendCountIndexKey(buf, to, tid), nil, nil)
	} else {
		_ = b.Delete(append(appendThreadPrefix(buf, tid), countSuffix...), nil)
	}
}

// addLive records in b that message mid of tid, created at created, has
// become live (+1) or stopped being live (-1). The caller holds the
// thread's lock, so the count it reads is the one its batch replaces.
func (s *Store) addLive(b *pebble.Batch, tid, mid string, created int64, delta int64) error {
	n, err := liveCount(s.db, tid)
	if err != nil {
		return err
	}
	kv := appendAgeKey(make([]byte, 0, len(ageNS)+padWidth+1+len(mid)+len(tid)), created, mid)
	if delta > 0 {
		k := len(kv)
		kv = append(kv, tid...)
		_ = b.Set(kv[:k], kv[k:], nil)
	} else {
		_ = b.Delete(kv, nil)
	}
	setLiveCount(b, tid, n, max(n+delta, 0))
	return nil
}

// liveChange is addLive for an existing message, whose creation time it
// reads. A message whose first version cannot be read was never indexed
// (a rebuild skips it too), so its index is left alone.
func (s *Store) liveChange(b *pebble.Batch, tid, mid string, delta int64) error {
	created, err := s.createdTS(mid)
	if errors.Is(err, ErrMalformed) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.addLive(b, tid, mid, created, delta)
}

// createdTS returns a message's creation time: its first version's ts.
func (s *Store) createdTS(mid string) (int64, error) {
	r, err := newVersionReader(s.db)
	if err != nil {
		return 0, err
	}
	defer r.close()
	return r.created(mid)
}

// AgeEntry is one live message found through the age index.
type AgeEntry struct {
	MessageID string
	ThreadID  string
	CreatedTS int64
}

// ScanAgeIndex calls fn for every live message created in [from, to], oldest
// first. fn may return ErrStopScan to stop early. Entries are hints: the
// caller re-reads the message before acting on it.
func (s *Store) ScanAgeIndex(ctx context.Context, from, to int64, fn func(AgeEntry) error) error {
	if from > to {
		return nil
	}
	lower := appendPadded([]byte(ageNS), from)
	upper := appendPadded([]byte(ageNS), to)
	upper = append(upper, ';') // past every ID created at to
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("scan age index: %w", err)
	}
	defer it.Close()
	for n, valid := 0, it.First(); valid; n, valid = n+1, it.Next() {
		if n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		ts, mid, ok := parseLogSuffix(it.Key()[len(ageNS):])
		if !ok {
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil || ValidateID(string(v)) != nil {
			continue
		}
		if err := fn(AgeEntry{MessageID: mid, ThreadID: string(v), CreatedTS: ts}); err != nil {
			if errors.Is(err, ErrStopScan) {
				return nil
			}
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("scan age index: %w", err)
	}
	return nil
}

// ScanThreadsOverCount calls fn for every thread with more than n live
// messages, with its count, most first. fn may return ErrStopScan.
func (s *Store) ScanThreadsOverCount(ctx context.Context, n int64, fn func(tid string, count int64) error) error {
	lower := append(appendPadded([]byte(countNS), n), ';') // past every thread at exactly n
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upperBound([]byte(countNS))})
	if err != nil {
		return fmt.Errorf("scan count index: %w", err)
	}
	defer it.Close()
	for valid := it.Last(); valid; valid = it.Prev() {
		if err := ctx.Err(); err != nil {
			return err
		}
		c, tid, ok := parseLogSuffix(it.Key()[len(countNS):])
		if !ok {
			continue
		}
		if err := fn(tid, c); err != nil {
			if errors.Is(err, ErrStopScan) {
				return nil
			}
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("scan count index: %w", err)
	}
	return nil
}

// LiveCount returns the number of live messages of a thread.
func (s *Store) LiveCount(ctx context.Context, tid string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := ValidateID(tid); err != nil {
		return 0, err
	}
	return liveCount(s.db, tid)
}

// LogEntry is one message of a thread's log, as ScanThreadLog reads it.
type LogEntry struct {
	MessageID string
	CreatedTS int64
	Deleted   bool  // its latest version is a tombstone
	DeletedTS int64 // when deleted
	Claimed   bool  // a policy purge has claimed it (live but no longer counted)
}

// ScanThreadLog calls fn for the messages of thread tid created before
// (not at) before, oldest first, walking the thread's log; fn may return
// ErrStopScan. It reads that thread's log and versions only. Messages whose
// latest version cannot be read are left out.
func (s *Store) ScanThreadLog(ctx context.Context, tid string, before int64, fn func(LogEntry) error) error {
	if err := ValidateID(tid); err != nil {
		return err
	}
	prefix := logPrefix(tid)
	upper := upperBound(prefix)
	if before < 1<<62 {
		upper = appendPadded(append([]byte(nil), prefix...), max(before, 0))
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("scan log of %s: %w", tid, err)
	}
	defer it.Close()
	r, err := newVersionReader(snap)
	if err != nil {
		return err
	}
	defer r.close()
	for n, valid := 0, it.First(); valid; n, valid = n+1, it.Next() {
		if n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		created, mid, ok := parseLogSuffix(it.Key()[len(prefix):])
		if !ok {
			continue
		}
		_, v, found, err := r.latest(mid)
		if err != nil {
			return fmt.Errorf("scan log of %s: %w", tid, err)
		}
		if !found {
			continue
		}
		h, ok := decodeHead(v)
		if !ok || h.Thread != tid {
			continue
		}
		e := LogEntry{MessageID: mid, CreatedTS: created, Deleted: h.Deleted, DeletedTS: h.DeletedTS}
		if !h.Deleted {
			if e.Claimed, err = hasKey(snap, purgeKey(KindMessage, mid)); err != nil {
				return err
			}
		}
		if err := fn(e); err != nil {
			if errors.Is(err, ErrStopScan) {
				return nil
			}
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("scan log of %s: %w", tid, err)
	}
	return nil
}

// ScanLiveMessages is ScanThreadLog restricted to live, unclaimed messages.
func (s *Store) ScanLiveMessages(ctx context.Context, tid string, before int64, fn func(AgeEntry) error) error {
	return s.ScanThreadLog(ctx, tid, before, func(e LogEntry) error {
		if e.Deleted || e.Claimed {
			return nil
		}
		return fn(AgeEntry{MessageID: e.MessageID, ThreadID: tid, CreatedTS: e.CreatedTS})
	})
}

// PolicyCheck is what BeginPolicyPurge re-checks under the thread's lock
// before claiming a live message; a zero field is not checked.
type PolicyCheck struct {
	// CreatedBefore (max_age): the message was created before this time.
	CreatedBefore int64
	// KeepNewest (max_messages): the thread has more than this many live
	// messages, so a claim never takes it below its cap.
	KeepNewest int64
}

// policyCause reports whether cause names a retention policy (a purge of
// a live message) rather than a soft delete.
func policyCause(cause string) bool { return cause == "max_age" || cause == "max_messages" }

// BeginPolicyPurge claims a live message for a policy purge (cause max_age
// or max_messages in m.Cause). Under the thread's lock it re-checks that
// the thread exists, is not deleted and not on legal hold (a hold set at
// any time before wins), that the message is live, unclaimed and still
// passes check; then, in one batch, it writes the purge marker and takes
// the message out of the live indexes. ErrNotEligible otherwise. From
// then on edits, deletes and restores of the message answer
// ErrPurgeInProgress, and PurgeMessage accepts it although it is live.
func (s *Store) BeginPolicyPurge(ctx context.Context, m PurgeMarker, check PolicyCheck) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.Kind != KindMessage || !policyCause(m.Cause) {
		return fmt.Errorf("%w: a policy purge claims a message for max_age or max_messages, not %s for %q",
			ErrInvalidArgument, m.Kind, m.Cause)
	}
	if err := validateIDs(m.ID, m.ThreadID); err != nil {
		return err
	}
	h := s.hold(m.ThreadID)
	defer h.release()

	if err := s.livePolicyTarget(m, check); err != nil {
		return fmt.Errorf("begin %s purge of message %s: %w", m.Cause, m.ID, err)
	}
	created, err := s.createdTS(m.ID)
	if err != nil {
		// Never indexed as live (see liveChange): no policy purges it.
		return fmt.Errorf("begin %s purge of message %s: %w: %w", m.Cause, m.ID, ErrNotEligible, err)
	}
	if check.CreatedBefore > 0 && created >= check.CreatedBefore {
		return fmt.Errorf("begin %s purge of message %s: %w: created after the cutoff", m.Cause, m.ID, ErrNotEligible)
	}
	if m.StartedAt == 0 {
		m.StartedAt = s.now().UnixNano()
	}
	v, err := encode(m)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	_ = b.Set(purgeKey(KindMessage, m.ID), v, nil)
	if err := s.addLive(b, m.ThreadID, m.ID, created, -1); err != nil {
		_ = b.Close()
		return err
	}
	// Not synced on its own, as BeginPurge: the purge's deletes follow it
	// in the log, and the group's Sync makes both durable.
	if err := s.apply(ctx, write{kind: writeState, batch: b, under: h}); err != nil {
		return fmt.Errorf("begin %s purge of message %s: %w", m.Cause, m.ID, err)
	}
	return nil
}

// livePolicyTarget checks a policy claim's thread and message; the caller
// holds the thread's lock.
func (s *Store) livePolicyTarget(m PurgeMarker, check PolicyCheck) error {
	t, err := s.readThread(m.ThreadID)
	switch {
	case err != nil:
		return fmt.Errorf("%w: thread: %w", ErrNotEligible, err)
	case t.Deleted:
		return fmt.Errorf("%w: thread deleted", ErrNotEligible)
	case t.LegalHold:
		return fmt.Errorf("%w: thread on legal hold", ErrNotEligible)
	}
	msg, err := s.readMessage(m.ThreadID, m.ID)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", ErrNotEligible, err)
	case msg.Deleted:
		return fmt.Errorf("%w: deleted", ErrNotEligible)
	}
	if claimed, err := s.purgeStarted(KindMessage, m.ID); err != nil {
		return err
	} else if claimed {
		return fmt.Errorf("%w: already claimed", ErrNotEligible)
	}
	if check.KeepNewest > 0 {
		n, err := liveCount(s.db, m.ThreadID)
		if err != nil {
			return err
		}
		if n <= check.KeepNewest {
			return fmt.Errorf("%w: thread has %d live messages, within its cap of %d", ErrNotEligible, n, check.KeepNewest)
		}
	}
	return nil
}

// policyClaim reports whether a policy purge or a subject erasure has
// claimed mid: either may purge it live.
func (s *Store) policyClaim(mid string) (bool, error) {
	v, err := s.get(purgeKey(KindMessage, mid))
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var m PurgeMarker
	if err := json.Unmarshal(v, &m); err != nil {
		return false, fmt.Errorf("purge marker of %s: %w: %w", mid, ErrMalformed, err)
	}
	return policyCause(m.Cause) || m.Cause == CauseSubject, nil
}
