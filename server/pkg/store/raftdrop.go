package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// ErrReplicated refuses what only a database of its own may do to a store
// whose writes are its group's proposals.
var ErrReplicated = errors.New("the store is a replica of a Raft group")

// DropRaftState deletes a replica's Raft log and state (every raft: key)
// from a database that becomes one of its own: a restored backup of a
// replicated shard is a one-node copy, not a replica of the group. The
// log's entries hold the writes they carried, purged ones among them,
// which no purge of the copy would ever reach: the span is erased from
// the folder's files too. A store with no Raft state is left as it is.
func (s *Store) DropRaftState(ctx context.Context) error {
	if s.Replicated() {
		return fmt.Errorf("drop the raft state: %w", ErrReplicated)
	}
	start, end := []byte(raftNS), upperBound([]byte(raftNS))
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return fmt.Errorf("drop the raft state: %w", err)
	}
	held := it.First()
	if err := it.Close(); err != nil {
		return fmt.Errorf("drop the raft state: %w", err)
	}
	if !held {
		return nil
	}
	// The erase is owed in the drop's batch: a crash before it is done
	// leaves the next retention run to erase the whole folder.
	b := s.db.NewBatch()
	_ = b.DeleteRange(start, end, nil)
	_ = b.Delete([]byte(eraseKey), nil)
	if err := s.apply(ctx, write{kind: writeRaft, batch: b, sync: true}); err != nil {
		return fmt.Errorf("drop the raft state: %w", err)
	}
	s.raftLog.Store(nil)
	spans := &EraseSpans{}
	spans.add(start, end)
	if _, err := s.Erase(ctx, spans, EraseOptions{}); err != nil {
		return fmt.Errorf("drop the raft state: erase: %w", err)
	}
	return nil
}
