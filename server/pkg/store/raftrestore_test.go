package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// A store holding another replica's log and state (a leader's checkpoint)
// adopts a snapshot with Restored: the leader's entries, hard state,
// truncation point, snapshot and membership go, the applied index stays,
// and the log goes on after the snapshot with this replica's hard state,
// as it reads after a reopen.
func TestRaftLogAdoptsARestoredState(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.RaftLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The leader's: entries 1-12 of term 3, a snapshot point at 8, the
	// log dropped up to 5, 12 applied.
	var ents []*raftpb.Entry
	for i := uint64(1); i <= 12; i++ {
		ents = append(ents, &raftpb.Entry{Index: new(i), Term: new(uint64(3))})
	}
	leaderConf := &raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	if err := l.Save(ctx, store.RaftUpdate{Entries: ents, HardState: &raftpb.HardState{Term: new(uint64(3)), Vote: new(uint64(1)), Commit: new(uint64(12))},
		Applied: 12, ConfState: leaderConf}); err != nil {
		t.Fatal(err)
	}
	if err := l.Truncate(ctx, 5, []byte("leader")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// This replica's adoption of the snapshot at 10, term 3.
	s, err = store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err = s.RaftLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conf := &raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}
	snap := &raftpb.Snapshot{Data: []byte("d"), Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(10)), Term: new(uint64(3)), ConfState: conf}}
	hard := &raftpb.HardState{Term: new(uint64(4)), Vote: new(uint64(2)), Commit: new(uint64(10))}
	next := []*raftpb.Entry{{Index: new(uint64(11)), Term: new(uint64(4)), Data: []byte("x")}}
	if err := l.Save(ctx, store.RaftUpdate{Restored: true, Install: snap, Entries: next, HardState: hard, ConfState: conf, Sync: true}); err != nil {
		t.Fatalf("adopt: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err = s.RaftLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gotHard, gotConf, _ := l.InitialState()
	first, _ := l.FirstIndex()
	last, _ := l.LastIndex()
	gotSnap, _ := l.Snapshot()
	if !proto.Equal(gotHard, hard) || !proto.Equal(gotConf, conf) || first != 11 || last != 11 || l.Applied() != 12 ||
		!proto.Equal(gotSnap, snap) {
		t.Fatalf("after adopting: hard %v conf %v first %d last %d applied %d snapshot %v", gotHard, gotConf, first, last, l.Applied(), gotSnap)
	}
	if term, err := l.Term(10); err != nil || term != 3 {
		t.Fatalf("Term(10) = %d, %v; want the snapshot's 3", term, err)
	}
	if _, err := l.Entries(5, 11, 1<<20); err == nil {
		t.Fatal("the leader's entries are still readable")
	}
}
