package store

// The Raft log of a replicated shard (docs/replication-design.md §4). A
// shard's Raft group keeps its log and state in the shard's own database,
// under the raft: prefix, so that the log and the data it produced are
// written by the one commit path, erased by the one erase step and can
// never disagree after a crash: every change of the log and state is one
// batch (raftsave.go). RaftLog serves raft.Storage from those keys.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Keys of the Raft log and state. raft: sorts outside every prefix the
// store scans for chat data (thread:, version:msg:, idx:, sys:).
const (
	raftNS = "raft:"
	// raftLogNS + 20-digit index: one raftpb.Entry.
	raftLogNS = "raft:log:"
	// raftHardKey: the raftpb.HardState (term, vote, commit).
	raftHardKey = "raft:hard"
	// raftTruncKey: "<index>:<term>" of the last entry dropped from the
	// log, the entry raft still asks the term of (absent: 0:0).
	raftTruncKey = "raft:trunc"
	// raftSnapKey: the newest raftpb.Snapshot: metadata and a small
	// descriptor, never the database itself.
	raftSnapKey = "raft:snap"
	// raftAppliedKey: the applied index, 20 digits.
	raftAppliedKey = "raft:applied"
	// raftConfKey: the raftpb.ConfState as of the applied index.
	raftConfKey = "raft:conf"
	// raftReplicaKey: the Raft ID of the replica this folder belongs to,
	// in decimal (raftreplica.go).
	raftReplicaKey = "raft:replica"
	// raftDedupeNS: the applied commands' IDs (raftapply.go).
)

// ErrRaftLog reports a request the log cannot honour: an append that
// would leave a gap, a range or index past the last entry. raft's own
// conditions keep raft's errors (raft.ErrCompacted, raft.ErrUnavailable,
// raft.ErrSnapOutOfDate), wrapped.
var ErrRaftLog = errors.New("raft log")

func raftLogKey(index uint64) []byte {
	return appendPadded(append(make([]byte, 0, len(raftLogNS)+padWidth), raftLogNS...), int64(index))
}

// RaftLog is a shard's Raft log and state, read by raft through
// raft.Storage and written with Save. Its methods are safe for concurrent
// use; raft's contract still wants one writer (the group's worker).
type RaftLog struct {
	s *Store

	// mu orders Save against the reads: a read never sees a batch half
	// reflected in the fields below, which change only after their batch
	// committed.
	mu        sync.Mutex
	hard      *raftpb.HardState // nil until one is saved
	snap      *raftpb.Snapshot  // never nil (EnsureSnapshot)
	conf      *raftpb.ConfState // applied ConfState; nil until one is saved
	truncIdx  uint64            // index of the last dropped entry (the "dummy")
	truncTerm uint64
	last      uint64 // index of the last entry; truncIdx when the log is empty
	applied   uint64
	replica   uint64 // the replica ID recorded (0: none)
	// dedupe is the term below which this process dropped the commands'
	// dedupe keys (raftapply.go).
	dedupe uint64
	// purged is the index of the last purge applied by this process,
	// erased the last one whose erase completed, owed the spans the
	// purges since removed (rafterase.go).
	purged, erased uint64
	owed           EraseSpans
	// purgeMu orders a purge's apply against an erase recording that
	// nothing is owed: a purge applied meanwhile keeps the debt.
	purgeMu sync.Mutex
}

// RaftLog returns the shard's Raft log, loading it on first use; later
// calls return the same value, so the cached state has one owner.
func (s *Store) RaftLog(ctx context.Context) (*RaftLog, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if l := s.raftLog.Load(); l != nil {
		return l, nil
	}
	l := &RaftLog{s: s}
	if err := l.load(); err != nil {
		return nil, fmt.Errorf("load raft log: %w", err)
	}
	if !s.raftLog.CompareAndSwap(nil, l) {
		return s.raftLog.Load(), nil
	}
	return l, nil
}

// load reads the state keys and finds the last entry.
func (l *RaftLog) load() error {
	var hard raftpb.HardState
	switch ok, err := l.getProto(raftHardKey, &hard); {
	case err != nil:
		return err
	case ok:
		l.hard = &hard
	}
	snap := &raftpb.Snapshot{}
	if _, err := l.getProto(raftSnapKey, snap); err != nil {
		return err
	}
	l.snap = raftpb.EnsureSnapshot(snap)
	var conf raftpb.ConfState
	switch ok, err := l.getProto(raftConfKey, &conf); {
	case err != nil:
		return err
	case ok:
		l.conf = &conf
	}
	if err := l.loadTrunc(); err != nil {
		return err
	}
	switch v, err := l.s.get([]byte(raftAppliedKey)); {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return err
	default:
		n, ok := parsePadded(v)
		if !ok {
			return fmt.Errorf("%s: %w: %q", raftAppliedKey, ErrMalformed, v)
		}
		l.applied = uint64(n)
	}
	if err := l.loadReplica(); err != nil {
		return err
	}
	return l.loadLast()
}

func (l *RaftLog) loadTrunc() error {
	v, err := l.s.get([]byte(raftTruncKey))
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	idx, term, ok := bytes.Cut(v, []byte{':'})
	i, err1 := strconv.ParseUint(string(idx), 10, 64)
	t, err2 := strconv.ParseUint(string(term), 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("%s: %w: %q", raftTruncKey, ErrMalformed, v)
	}
	l.truncIdx, l.truncTerm = i, t
	return nil
}

// loadLast finds the last entry and checks that the log starts right
// after the truncation point and names its own index.
func (l *RaftLog) loadLast() error {
	it, err := l.s.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte(raftLogNS), UpperBound: upperBound([]byte(raftLogNS)),
	})
	if err != nil {
		return err
	}
	defer it.Close()
	l.last = l.truncIdx
	if !it.Last() {
		return it.Error()
	}
	lastIdx, err := l.keyIndex(it.Key())
	if err != nil {
		return err
	}
	it.First()
	firstIdx, err := l.keyIndex(it.Key())
	if err != nil {
		return err
	}
	if firstIdx != l.truncIdx+1 {
		return fmt.Errorf("%w: first entry %d, truncated at %d", ErrMalformed, firstIdx, l.truncIdx)
	}
	e, err := l.entry(lastIdx)
	if err != nil {
		return err
	}
	if e.GetIndex() != lastIdx {
		return fmt.Errorf("%w: entry under index %d says %d", ErrMalformed, lastIdx, e.GetIndex())
	}
	l.last = lastIdx
	return nil
}

func (l *RaftLog) keyIndex(key []byte) (uint64, error) {
	n, ok := parsePadded(bytes.TrimPrefix(key, []byte(raftLogNS)))
	if !ok {
		return 0, fmt.Errorf("%w: raft log key %q", ErrMalformed, key)
	}
	return uint64(n), nil
}

// getProto reads key into m, reporting whether it exists.
func (l *RaftLog) getProto(key string, m proto.Message) (bool, error) {
	v, err := l.s.get([]byte(key))
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := proto.Unmarshal(v, m); err != nil {
		return false, fmt.Errorf("%s: %w: %w", key, ErrMalformed, err)
	}
	return true, nil
}

// entry reads the entry at index i, which must be in the log.
func (l *RaftLog) entry(i uint64) (*raftpb.Entry, error) {
	v, err := l.s.get(raftLogKey(i))
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("entry %d missing: %w", i, raft.ErrUnavailable)
	}
	if err != nil {
		return nil, err
	}
	e := &raftpb.Entry{}
	if err := proto.Unmarshal(v, e); err != nil {
		return nil, fmt.Errorf("entry %d: %w: %w", i, ErrMalformed, err)
	}
	return e, nil
}

// InitialState returns the saved hard state (nil when none was saved) and
// the applied ConfState, or the snapshot's when none was saved.
func (l *RaftLog) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var hard *raftpb.HardState
	if l.hard != nil {
		hard = proto.Clone(l.hard).(*raftpb.HardState)
	}
	cs := l.conf
	if cs == nil {
		cs = l.snap.GetMetadata().GetConfState()
	}
	return hard, proto.Clone(raftpb.EnsureConfState(cs)).(*raftpb.ConfState), nil
}

// Entries returns the entries [lo, hi), at least one and no more than
// maxSize bytes beyond the first, as raft.Storage says.
func (l *RaftLog) Entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lo <= l.truncIdx {
		return nil, raft.ErrCompacted
	}
	if hi > l.last+1 || lo > hi {
		return nil, fmt.Errorf("%w: entries [%d, %d) past the last index %d", ErrRaftLog, lo, hi, l.last)
	}
	if l.last == l.truncIdx {
		return nil, raft.ErrUnavailable
	}
	it, err := l.s.db.NewIter(&pebble.IterOptions{LowerBound: raftLogKey(lo), UpperBound: raftLogKey(hi)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var ents []*raftpb.Entry
	var size uint64
	want := lo
	for ok := it.First(); ok; ok = it.Next() {
		e := &raftpb.Entry{}
		if err := proto.Unmarshal(it.Value(), e); err != nil {
			return nil, fmt.Errorf("entry %q: %w: %w", it.Key(), ErrMalformed, err)
		}
		if e.GetIndex() != want {
			return nil, fmt.Errorf("%w: entry %d where %d was due", ErrMalformed, e.GetIndex(), want)
		}
		size += uint64(proto.Size(e))
		if len(ents) > 0 && size > maxSize {
			break
		}
		ents = append(ents, e)
		want++
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	if len(ents) == 0 && lo < hi {
		return nil, fmt.Errorf("entry %d missing: %w", lo, raft.ErrUnavailable)
	}
	return ents, nil
}

// Term returns the term of entry i, for i from the truncation point to
// the last index.
func (l *RaftLog) Term(i uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.term(i)
}

func (l *RaftLog) term(i uint64) (uint64, error) {
	switch {
	case i < l.truncIdx:
		return 0, raft.ErrCompacted
	case i > l.last:
		return 0, raft.ErrUnavailable
	case i == l.truncIdx:
		return l.truncTerm, nil
	}
	e, err := l.entry(i)
	if err != nil {
		return 0, err
	}
	return e.GetTerm(), nil
}

// LastIndex returns the index of the last entry (the truncation point
// when the log is empty).
func (l *RaftLog) LastIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last, nil
}

// FirstIndex returns the index of the first entry Entries may return.
func (l *RaftLog) FirstIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.truncIdx + 1, nil
}

// Snapshot returns the newest snapshot recorded or installed.
func (l *RaftLog) Snapshot() (*raftpb.Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return proto.Clone(l.snap).(*raftpb.Snapshot), nil
}

// Applied returns the applied index saved last (0 when none was).
func (l *RaftLog) Applied() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.applied
}

var _ raft.Storage = (*RaftLog)(nil)
