package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// openLog opens the store at dir and its Raft log.
func openLog(t *testing.T, dir string) (*store.Store, *store.RaftLog) {
	t.Helper()
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.RaftLog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s, l
}

// A log records the replica it belongs to: a new one is empty and
// records none; Claim records one, survives a reopen, is a no-op for the
// same ID and refuses another (ErrOtherReplica); a restored state drops
// the leader's record and keeps the one the adoption names.
func TestRaftLogRecordsItsReplica(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")
	s, l := openLog(t, dir)
	if !l.Empty() || l.Replica() != 0 {
		t.Fatalf("a new log: empty %v, replica %d", l.Empty(), l.Replica())
	}
	if err := l.Claim(ctx, 0); !errors.Is(err, store.ErrRaftLog) {
		t.Fatalf("claim for replica 0: %v", err)
	}
	if err := l.Claim(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if l.Empty() {
		t.Fatal("a log recording its replica counts as empty")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, l = openLog(t, dir)
	if l.Replica() != 7 {
		t.Fatalf("replica after a reopen: %d, want 7", l.Replica())
	}
	if err := l.Claim(ctx, 7); err != nil {
		t.Fatalf("claim again for the same replica: %v", err)
	}
	if err := l.Claim(ctx, 8); !errors.Is(err, store.ErrOtherReplica) || l.Replica() != 7 {
		t.Fatalf("claim for another replica: %v, replica %d", err, l.Replica())
	}
	// A state restored from replica 7's leader checkpoint, adopted by 9.
	snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1)),
		ConfState: &raftpb.ConfState{Voters: []uint64{7}}}}
	if err := l.Save(ctx, store.RaftUpdate{Restored: true, Replica: 9, Install: snap, Sync: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, l = openLog(t, dir)
	defer s.Close()
	if l.Replica() != 9 {
		t.Fatalf("replica after adopting a restored state: %d, want 9", l.Replica())
	}

	// A log with a state but no record (written before replicas recorded
	// their IDs) is not empty, and takes the first claim.
	s2, l2 := openLog(t, filepath.Join(t.TempDir(), "db"))
	defer s2.Close()
	if err := l2.Save(ctx, store.RaftUpdate{HardState: &raftpb.HardState{Term: new(uint64(2)), Vote: new(uint64(3))}, Sync: true}); err != nil {
		t.Fatal(err)
	}
	if l2.Empty() {
		t.Fatal("a log with a hard state counts as empty")
	}
	if err := l2.Claim(ctx, 3); err != nil || l2.Replica() != 3 {
		t.Fatalf("claim of an unrecorded log: %v, replica %d", err, l2.Replica())
	}
}
