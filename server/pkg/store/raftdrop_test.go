package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// A store holding a replica's log and state (a restored backup of a
// replicated shard) drops them: the reopened store has no entry, hard
// state, membership or applied index, and no file of its folder holds
// what the entries carried; its data stays. A second drop does nothing.
func TestDropRaftStateErasesTheLog(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateThread(ctx, store.Thread{ID: "t1", Title: "kept", Author: "u"}); err != nil {
		t.Fatal(err)
	}
	l, err := s.RaftLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ents []*raftpb.Entry
	for i := uint64(1); i <= 5; i++ {
		ents = append(ents, &raftpb.Entry{Index: new(i), Term: new(uint64(2)), Data: []byte("LoggedBodyR7")})
	}
	if err := l.Save(ctx, store.RaftUpdate{Entries: ents, HardState: &raftpb.HardState{Term: new(uint64(2)), Commit: new(uint64(5))},
		Applied: 5, ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}, Sync: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	storetest.RequireAll(t, dir, "LoggedBodyR7")
	if err := s.DropRaftState(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.DropRaftState(ctx); err != nil {
		t.Fatalf("a second drop: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	storetest.RequireNone(t, dir, "LoggedBodyR7")
	s, err = store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetThread(ctx, "t1"); err != nil {
		t.Fatalf("the data after the drop: %v", err)
	}
	if erased, err := s.Erased(ctx); err != nil || !erased {
		t.Fatalf("erased %v, %v", erased, err)
	}
	l, err = s.RaftLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last, err := l.LastIndex()
	hard, conf, serr := l.InitialState()
	if err != nil || serr != nil || last != 0 || l.Applied() != 0 || hard.GetTerm() != 0 || len(conf.GetVoters()) != 0 {
		t.Fatalf("after the drop: last %d, applied %d, hard %v, conf %v (%v, %v)", last, l.Applied(), hard, conf, err, serr)
	}
}
