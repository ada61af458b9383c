package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// raftModel runs the same operations on a store's RaftLog and on
// raft.MemoryStorage, the library's reference implementation, and
// compares everything raft can read after each one. The store is closed
// and reopened now and then, so what is compared is what is on disk.
type raftModel struct {
	t    *testing.T
	rng  *rand.Rand
	dir  string
	s    *store.Store
	log  *store.RaftLog
	mem  *raft.MemoryStorage
	term uint64
}

func newRaftModel(t *testing.T, seed uint64) *raftModel {
	m := &raftModel{t: t, rng: rand.New(rand.NewPCG(seed, 40)), dir: filepath.Join(t.TempDir(), "db"),
		mem: raft.NewMemoryStorage(), term: 1}
	m.reopen()
	t.Cleanup(func() { _ = m.s.Close() })
	return m
}

func (m *raftModel) reopen() {
	m.t.Helper()
	if m.s != nil {
		if err := m.s.Close(); err != nil {
			m.t.Fatal(err)
		}
	}
	s, err := store.Open(m.dir, store.Options{})
	if err != nil {
		m.t.Fatal(err)
	}
	m.s = s
	if m.log, err = s.RaftLog(context.Background()); err != nil {
		m.t.Fatal(err)
	}
}

// bounds are the memory storage's first and last index.
func (m *raftModel) bounds() (first, last uint64) {
	first, _ = m.mem.FirstIndex()
	last, _ = m.mem.LastIndex()
	return first, last
}

// around returns a number in [lo-2, hi+2], never below 0 (hi below lo
// counts as lo: a log cut back below its snapshot's index).
func (m *raftModel) around(lo, hi uint64) uint64 {
	hi = max(hi, lo)
	v := int64(lo) - 2 + m.rng.Int64N(int64(hi-lo)+5)
	return uint64(max(v, 0))
}

func (m *raftModel) entries(from uint64, n int) []*raftpb.Entry {
	if m.rng.IntN(4) == 0 {
		m.term += uint64(m.rng.IntN(3))
	}
	ents := make([]*raftpb.Entry, n)
	for i := range ents {
		e := &raftpb.Entry{Index: new(from + uint64(i)), Term: new(m.term)}
		if k := m.rng.IntN(300); k > 0 {
			e.Data = fmt.Appendf(nil, "%0*d", k, m.rng.IntN(1000))
		}
		if m.rng.IntN(10) == 0 {
			e.Type = raftpb.EntryType_EntryConfChangeV2.Enum()
		}
		ents[i] = e
	}
	return ents
}

// save writes u unsynced: reopening after a clean close finds it, and
// durability is TestRaftLogCrash's subject.
func (m *raftModel) save(ctx context.Context, u store.RaftUpdate) error { return m.log.Save(ctx, u) }

// compact is MemoryStorage.Compact: index 0 (the first dummy entry) is
// always compacted, and 0 means "none" in an update.
func (m *raftModel) compact(ctx context.Context, i uint64) error {
	if i == 0 {
		return raft.ErrCompacted
	}
	return m.save(ctx, store.RaftUpdate{Compact: i})
}

// step runs one random operation on both.
func (m *raftModel) step(ctx context.Context) string {
	first, last := m.bounds()
	snap, _ := m.mem.Snapshot()
	snapIdx := snap.GetMetadata().GetIndex()
	switch op := m.rng.IntN(20); {
	case op < 8:
		from := m.around(first, last+1)
		ents := m.entries(max(from, 1), 1+m.rng.IntN(8))
		if from := ents[0].GetIndex(); from > last+1 {
			// MemoryStorage panics on a gap; the log refuses it.
			m.mustFail(m.save(ctx, store.RaftUpdate{Entries: ents}), store.ErrRaftLog, "gap append")
			return "gap"
		}
		m.same(m.save(ctx, store.RaftUpdate{Entries: ents}), m.mem.Append(ents), "append")
		return "append"
	case op < 10:
		hs := &raftpb.HardState{Term: new(m.term), Vote: new(m.rng.Uint64N(4)), Commit: new(m.rng.Uint64N(last + 1))}
		m.same(m.save(ctx, store.RaftUpdate{HardState: hs}), m.mem.SetHardState(hs), "hard state")
		return "hard"
	case op < 12:
		i := m.around(first-1, last)
		if i > last {
			m.mustFail(m.save(ctx, store.RaftUpdate{Compact: i}), store.ErrRaftLog, "compact past the end")
			return "compact-past"
		}
		m.same(m.compact(ctx, i), m.mem.Compact(i), "compact")
		return "compact"
	case op < 14:
		i := m.around(snapIdx, last)
		if i > last || i < first-1 {
			if i > snapIdx { // MemoryStorage panics here
				m.mustFail(m.save(ctx, store.RaftUpdate{Record: &store.RaftSnapshotPoint{Index: i}}), nil, "snapshot out of range")
				return "snap-range"
			}
		}
		cs := &raftpb.ConfState{Voters: []uint64{1, 2, m.rng.Uint64N(9) + 3}}
		data := fmt.Appendf(nil, "snapshot %d", i)
		_, err := m.mem.CreateSnapshot(i, cs, data)
		m.same(m.save(ctx, store.RaftUpdate{Record: &store.RaftSnapshotPoint{Index: i, ConfState: cs, Data: data}}), err, "create snapshot")
		return "snap"
	case op < 16:
		idx := m.around(snapIdx, last+10)
		m.term += uint64(m.rng.IntN(2))
		s := &raftpb.Snapshot{Data: []byte("installed"), Metadata: &raftpb.SnapshotMetadata{
			Index: new(idx), Term: new(m.term), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}}}
		m.same(m.save(ctx, store.RaftUpdate{Install: s}), m.mem.ApplySnapshot(s), "apply snapshot")
		return "install"
	case op < 17:
		m.reopen()
		return "reopen"
	default:
		return "read"
	}
}

// same fails unless both errors are nil, or both are raft's same error.
func (m *raftModel) same(got, want error, what string) {
	m.t.Helper()
	if (got == nil) != (want == nil) || (want != nil && !errors.Is(got, want)) {
		m.t.Fatalf("%s: raft log says %v, memory storage %v", what, got, want)
	}
}

func (m *raftModel) mustFail(err, want error, what string) {
	m.t.Helper()
	if err == nil || (want != nil && !errors.Is(err, want)) {
		m.t.Fatalf("%s: got %v, want an error (%v)", what, err, want)
	}
}

// compare checks every read raft makes.
func (m *raftModel) compare(after string) {
	m.t.Helper()
	first, last := m.bounds()
	if f, _ := m.log.FirstIndex(); f != first {
		m.t.Fatalf("after %s: first index %d, memory %d", after, f, first)
	}
	if l, _ := m.log.LastIndex(); l != last {
		m.t.Fatalf("after %s: last index %d, memory %d", after, l, last)
	}
	hs, cs, _ := m.log.InitialState()
	mhs, mcs, _ := m.mem.InitialState()
	if !proto.Equal(hs, mhs) || !proto.Equal(cs, mcs) {
		m.t.Fatalf("after %s: initial state %v %v, memory %v %v", after, hs, cs, mhs, mcs)
	}
	s, _ := m.log.Snapshot()
	ms, _ := m.mem.Snapshot()
	if !proto.Equal(s.GetMetadata(), ms.GetMetadata()) || !bytes.Equal(s.GetData(), ms.GetData()) {
		m.t.Fatalf("after %s: snapshot %v, memory %v", after, s, ms)
	}
	// Both ends of the log, and a sample of the middle.
	terms := []uint64{first - min(first, 2), first - min(first, 1), first, last, last + 1, last + 2}
	for range 6 {
		terms = append(terms, m.around(first, last))
	}
	for _, i := range terms {
		got, err := m.log.Term(i)
		want, merr := m.mem.Term(i)
		if got != want || !errors.Is(err, merr) {
			m.t.Fatalf("after %s: term(%d) = %d, %v; memory %d, %v", after, i, got, err, want, merr)
		}
	}
	for range 4 {
		lo := m.around(first, last+1)
		hi := min(lo+m.rng.Uint64N(12), last+1)
		if lo > hi {
			continue
		}
		maxSize := uint64(math.MaxUint64)
		if m.rng.IntN(2) == 0 {
			maxSize = m.rng.Uint64N(1200)
		}
		got, err := m.log.Entries(lo, hi, maxSize)
		want, merr := m.mem.Entries(lo, hi, maxSize)
		if !errors.Is(err, merr) || len(got) != len(want) {
			m.t.Fatalf("after %s: entries(%d, %d, %d): %d, %v; memory %d, %v", after, lo, hi, maxSize, len(got), err, len(want), merr)
		}
		for k := range got {
			if !proto.Equal(got[k], want[k]) {
				m.t.Fatalf("after %s: entries(%d, %d)[%d] = %v, memory %v", after, lo, hi, k, got[k], want[k])
			}
		}
	}
	m.compareSizes(after, first, last)
}

// compareSizes compares the sizes a trim by bytes reads (EntrySizes)
// with the entries'.
func (m *raftModel) compareSizes(after string, first, last uint64) {
	m.t.Helper()
	want, _ := m.mem.Entries(first, last+1, math.MaxUint64)
	sizes, err := m.log.EntrySizes(first, last+1)
	if err != nil || len(sizes) != len(want) {
		m.t.Fatalf("after %s: entry sizes [%d, %d]: %d, %v; memory %d entries", after, first, last, len(sizes), err, len(want))
	}
	for k := range want {
		if sizes[k] != uint64(proto.Size(want[k])) {
			m.t.Fatalf("after %s: entry %d's size %d, memory %d", after, first+uint64(k), sizes[k], proto.Size(want[k]))
		}
	}
	if _, err := m.log.EntrySizes(first-1, last+1); first > 1 && !errors.Is(err, raft.ErrCompacted) {
		m.t.Fatalf("after %s: entry sizes from %d, before the first: %v", after, first-1, err)
	}
}

// The log in Pebble behaves as raft.MemoryStorage on random operations,
// across reopening.
func TestRaftLogMatchesMemoryStorage(t *testing.T) {
	seeds, steps := 4, 250
	if testing.Short() {
		seeds, steps = 2, 100
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			ctx := context.Background()
			m := newRaftModel(t, seed)
			ops := map[string]int{}
			for range steps {
				op := m.step(ctx)
				ops[op]++
				m.compare(op)
			}
			m.reopen()
			m.compare("final reopen")
			t.Logf("operations: %v", ops)
		})
	}
}

// The applied index and ConfState are saved with entries and hard state
// in one update, and InitialState prefers the applied ConfState to the
// snapshot's.
func TestRaftLogSavesAppliedState(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openAt(t, dir, newClock())
	l, err := s.RaftLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.RaftLog(ctx); again != l {
		t.Fatal("a second RaftLog call returned another value")
	}
	ents := []*raftpb.Entry{{Index: new(uint64(1)), Term: new(uint64(1))}, {Index: new(uint64(2)), Term: new(uint64(1))}}
	conf := &raftpb.ConfState{Voters: []uint64{7, 8, 9}}
	err = l.Save(ctx, store.RaftUpdate{Entries: ents, HardState: &raftpb.HardState{Term: new(uint64(1)), Commit: new(uint64(2))},
		Applied: 2, ConfState: conf, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	// A refused update writes nothing, not even its valid parts.
	err = l.Save(ctx, store.RaftUpdate{Entries: []*raftpb.Entry{{Index: new(uint64(9)), Term: new(uint64(1))}}, Applied: 5})
	if !errors.Is(err, store.ErrRaftLog) {
		t.Fatalf("gap append: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, dir, newClock())
	l, err = s.RaftLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hs, cs, _ := l.InitialState()
	if l.Applied() != 2 || hs.GetCommit() != 2 || !slices.Equal(cs.GetVoters(), conf.GetVoters()) {
		t.Fatalf("reopened: applied %d, hard state %v, conf %v", l.Applied(), hs, cs)
	}
	if last, _ := l.LastIndex(); last != 2 {
		t.Fatalf("last index %d, want 2", last)
	}
}
