package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.etcd.io/raft/v3"
)

// A replica's folder records which replica it is (docs/replication-design.md
// §8): Raft's safety rests on a voter never forgetting what it
// acknowledged, so a log must never be run under another replica's ID,
// and a node must be able to tell a folder it never started from one it
// lost.

// ErrOtherReplica refuses a log that belongs to another replica than the
// one asked for: a folder left by an earlier replica of the shard on
// this node.
var ErrOtherReplica = errors.New("the raft log belongs to another replica")

// loadReplica reads the recorded replica ID.
func (l *RaftLog) loadReplica() error {
	v, err := l.s.get([]byte(raftReplicaKey))
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	id, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil || id == 0 {
		return fmt.Errorf("%s: %w: %q", raftReplicaKey, ErrMalformed, v)
	}
	l.replica = id
	return nil
}

// Replica returns the Raft ID of the replica this log belongs to, 0 when
// none was recorded (a new folder, or one written before IDs were).
func (l *RaftLog) Replica() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.replica
}

// Empty reports whether the log holds nothing of any replica: no hard
// state, no entry, no snapshot and no membership. A folder whose log is
// empty and records no replica never ran one (or was lost).
func (l *RaftLog) Empty() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.replica == 0 && (l.hard == nil || raft.IsEmptyHardState(l.hard)) && l.last == 0 &&
		l.snap.GetMetadata().GetIndex() == 0 && len(l.conf.GetVoters()) == 0 && len(l.conf.GetLearners()) == 0
}

// Claim records that the log belongs to replica id, synced, before the
// replica runs; a log already recorded for id is left as it is, one
// recorded for another replica is refused (ErrOtherReplica).
func (l *RaftLog) Claim(ctx context.Context, id uint64) error {
	if id == 0 {
		return fmt.Errorf("%w: replica ID 0", ErrRaftLog)
	}
	switch have := l.Replica(); {
	case have == id:
		return nil
	case have != 0:
		return fmt.Errorf("%w: recorded %d, asked %d", ErrOtherReplica, have, id)
	}
	return l.Save(ctx, RaftUpdate{Replica: id, Sync: true})
}
