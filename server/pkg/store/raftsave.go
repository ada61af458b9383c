package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// RaftUpdate is one change of a Raft log and state, written as one batch:
// a crash leaves all of it or none. Zero fields change nothing. The parts
// apply in the order of the fields.
type RaftUpdate struct {
	// Restored says the database under the log was replaced by a
	// snapshot's state (a leader's checkpoint, design §7): the log and
	// state keys it came with are the leader's and are dropped first,
	// all but the applied index (the state's) and the commands' dedupe
	// keys. Install, HardState and ConfState then give this replica's.
	Restored bool
	// Install replaces the log with a received snapshot: every entry is
	// dropped and the log continues after the snapshot's index (as
	// raft.MemoryStorage.ApplySnapshot). The database state the snapshot
	// stands for is installed by the caller, not here.
	Install *raftpb.Snapshot
	// Entries are appended; an entry at index i first drops every entry
	// from i on (a new leader's log wins), entries before the first
	// index are ignored, and one past the last index plus one is a gap
	// (ErrRaftLog).
	Entries []*raftpb.Entry
	// Record records a snapshot at an applied index
	// (raft.MemoryStorage.CreateSnapshot); the log keeps its entries.
	Record *RaftSnapshotPoint
	// Compact drops every entry up to and including this index, which
	// must be in the log (raft.MemoryStorage.Compact); 0: none.
	Compact uint64
	// HardState replaces the saved one.
	HardState *raftpb.HardState
	// Applied is the new applied index; 0: unchanged.
	Applied uint64
	// ConfState is the membership as of Applied.
	ConfState *raftpb.ConfState
	// Replica records the Raft ID of the replica this log belongs to
	// (RaftLog.Claim); 0: unchanged. Restored drops the leader's.
	Replica uint64
	// Sync makes the batch durable before Save returns (raft's
	// Ready.MustSync: before any message that depends on it is sent).
	Sync bool
}

// RaftSnapshotPoint is a snapshot to record: the index it was taken at,
// the membership then, and the descriptor raft sends to a follower.
type RaftSnapshotPoint struct {
	Index     uint64
	ConfState *raftpb.ConfState
	Data      []byte
}

// raftState is what a batch changes of RaftLog's cached fields: it is
// worked on while the batch is built and copied to the RaftLog once the
// batch committed.
type raftState struct {
	hard                *raftpb.HardState
	snap                *raftpb.Snapshot
	conf                *raftpb.ConfState
	truncIdx, truncTerm uint64
	last, applied       uint64
	replica             uint64
}

// Save writes u in one batch through the store's commit path. A refused
// update (an out-of-date snapshot, a gap, an index out of range) writes
// nothing and wraps raft's error or ErrRaftLog.
func (l *RaftLog) Save(ctx context.Context, u RaftUpdate) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := raftState{hard: l.hard, snap: l.snap, conf: l.conf, truncIdx: l.truncIdx,
		truncTerm: l.truncTerm, last: l.last, applied: l.applied, replica: l.replica}
	// Indexed: a snapshot point or compaction reads the term of an entry
	// the same batch may have appended.
	b := l.s.db.NewIndexedBatch()
	if err := l.build(b, &st, u); err != nil {
		_ = b.Close()
		return err
	}
	if err := l.s.apply(ctx, write{kind: writeRaft, batch: b, sync: u.Sync}); err != nil {
		return fmt.Errorf("save raft log: %w", err)
	}
	l.hard, l.snap, l.conf = st.hard, st.snap, st.conf
	l.truncIdx, l.truncTerm, l.last, l.applied = st.truncIdx, st.truncTerm, st.last, st.applied
	l.replica = st.replica
	return nil
}

// build writes u's parts into b, in order, and tracks them in st.
func (l *RaftLog) build(b *pebble.Batch, st *raftState, u RaftUpdate) error {
	if u.Restored {
		*st = raftState{snap: raftpb.EnsureSnapshot(&raftpb.Snapshot{}), applied: st.applied}
		_ = b.DeleteRange(raftLogKey(0), upperBound([]byte(raftLogNS)), nil)
		for _, k := range []string{raftHardKey, raftTruncKey, raftSnapKey, raftConfKey, raftReplicaKey} {
			_ = b.Delete([]byte(k), nil)
		}
	}
	if u.Replica != 0 {
		st.replica = u.Replica
		_ = b.Set([]byte(raftReplicaKey), strconv.AppendUint(nil, u.Replica, 10), nil)
	}
	if u.Install != nil {
		if err := l.install(b, st, u.Install); err != nil {
			return err
		}
	}
	if err := l.appendTo(b, st, u.Entries); err != nil {
		return err
	}
	if u.Record != nil {
		if err := l.record(b, st, *u.Record); err != nil {
			return err
		}
	}
	if u.Compact != 0 { // 0 is the first dummy entry, compacted from the start
		if err := l.compact(b, st, u.Compact); err != nil {
			return err
		}
	}
	if u.HardState != nil {
		st.hard = proto.Clone(u.HardState).(*raftpb.HardState)
		if err := setProto(b, raftHardKey, st.hard); err != nil {
			return err
		}
	}
	if u.Applied != 0 {
		st.applied = u.Applied
		_ = b.Set([]byte(raftAppliedKey), appendPadded(nil, int64(u.Applied)), nil)
	}
	if u.ConfState != nil {
		st.conf = proto.Clone(u.ConfState).(*raftpb.ConfState)
		if err := setProto(b, raftConfKey, st.conf); err != nil {
			return err
		}
	}
	return nil
}

func (l *RaftLog) install(b *pebble.Batch, st *raftState, snap *raftpb.Snapshot) error {
	snap = proto.Clone(raftpb.EnsureSnapshot(snap)).(*raftpb.Snapshot)
	have, idx := st.snap.GetMetadata().GetIndex(), snap.GetMetadata().GetIndex()
	// A bootstrap snapshot may carry only a ConfState (index 0), as in
	// MemoryStorage.
	if have != 0 && have >= idx {
		return fmt.Errorf("install snapshot at %d over one at %d: %w", idx, have, raft.ErrSnapOutOfDate)
	}
	_ = b.DeleteRange(raftLogKey(0), upperBound([]byte(raftLogNS)), nil)
	st.snap = snap
	st.truncIdx, st.truncTerm, st.last = idx, snap.GetMetadata().GetTerm(), idx
	setTrunc(b, st)
	return setProto(b, raftSnapKey, snap)
}

func (l *RaftLog) appendTo(b *pebble.Batch, st *raftState, ents []*raftpb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	first := ents[0].GetIndex()
	for i, e := range ents {
		if e.GetIndex() != first+uint64(i) {
			return fmt.Errorf("%w: entries not consecutive: %d after %d", ErrRaftLog, e.GetIndex(), first+uint64(i)-1)
		}
	}
	if first+uint64(len(ents))-1 <= st.truncIdx {
		return nil // all before the first index
	}
	if first <= st.truncIdx {
		ents = ents[st.truncIdx+1-first:]
		first = st.truncIdx + 1
	}
	if first > st.last+1 {
		return fmt.Errorf("%w: append at %d leaves a gap after the last index %d", ErrRaftLog, first, st.last)
	}
	if first <= st.last {
		_ = b.DeleteRange(raftLogKey(first), raftLogKey(st.last+1), nil)
	}
	for _, e := range ents {
		if err := setProto(b, string(raftLogKey(e.GetIndex())), e); err != nil {
			return err
		}
	}
	st.last = first + uint64(len(ents)) - 1
	return nil
}

func (l *RaftLog) record(b *pebble.Batch, st *raftState, p RaftSnapshotPoint) error {
	if p.Index <= st.snap.GetMetadata().GetIndex() {
		return fmt.Errorf("record snapshot at %d: %w", p.Index, raft.ErrSnapOutOfDate)
	}
	if p.Index > st.last {
		return fmt.Errorf("%w: snapshot at %d past the last index %d", ErrRaftLog, p.Index, st.last)
	}
	term, err := l.termIn(b, st, p.Index)
	if err != nil {
		return fmt.Errorf("record snapshot at %d: %w", p.Index, err)
	}
	snap := proto.Clone(st.snap).(*raftpb.Snapshot)
	snap.Metadata.Index, snap.Metadata.Term = new(p.Index), new(term)
	if p.ConfState != nil {
		snap.Metadata.ConfState = proto.Clone(p.ConfState).(*raftpb.ConfState)
	}
	snap.Data = append([]byte(nil), p.Data...)
	st.snap = snap
	return setProto(b, raftSnapKey, snap)
}

func (l *RaftLog) compact(b *pebble.Batch, st *raftState, i uint64) error {
	if i <= st.truncIdx {
		return fmt.Errorf("compact to %d: %w", i, raft.ErrCompacted)
	}
	if i > st.last {
		return fmt.Errorf("%w: compact to %d past the last index %d", ErrRaftLog, i, st.last)
	}
	term, err := l.termIn(b, st, i)
	if err != nil {
		return fmt.Errorf("compact to %d: %w", i, err)
	}
	_ = b.DeleteRange(raftLogKey(0), raftLogKey(i+1), nil)
	st.truncIdx, st.truncTerm = i, term
	setTrunc(b, st)
	return nil
}

// termIn is the term of entry i as the batch being built leaves it
// (entries it appended are read from it).
func (l *RaftLog) termIn(b *pebble.Batch, st *raftState, i uint64) (uint64, error) {
	if i == st.truncIdx {
		return st.truncTerm, nil
	}
	if i < st.truncIdx || i > st.last {
		return 0, raft.ErrUnavailable
	}
	v, err := getFrom(b, raftLogKey(i))
	if err != nil {
		return 0, fmt.Errorf("entry %d: %w", i, err)
	}
	e := &raftpb.Entry{}
	if err := proto.Unmarshal(v, e); err != nil {
		return 0, fmt.Errorf("entry %d: %w: %w", i, ErrMalformed, err)
	}
	return e.GetTerm(), nil
}

func setTrunc(b *pebble.Batch, st *raftState) {
	v := strconv.AppendUint(nil, st.truncIdx, 10)
	v = append(v, ':')
	_ = b.Set([]byte(raftTruncKey), strconv.AppendUint(v, st.truncTerm, 10), nil)
}

func setProto(b *pebble.Batch, key string, m proto.Message) error {
	v, err := proto.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	_ = b.Set([]byte(key), v, nil)
	return nil
}
