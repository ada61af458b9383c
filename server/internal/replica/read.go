package replica

import (
	"context"
	"encoding/binary"
	"fmt"

	"go.etcd.io/raft/v3"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// ReadIndex returns once this replica may serve a linearizable read of
// the group from its store (docs/replication-design.md §5, "Reads"): it
// leads, a quorum confirmed that it still led after the call began, and
// it has applied every entry committed before then. Nothing committed
// before ReadIndex was called is missing from what it reads next.
//
// A replica that does not lead, or stops leading before the read is
// confirmed, answers an error wrapping store.ErrNotLeader (a follower
// does not forward: the router sends reads to the leader); ctx's error
// when ctx ends first. A leader elected so recently that it has not yet
// applied an entry of its term waits for that entry: until then its
// state may lack entries earlier leaders committed.
func (h *Host) ReadIndex(ctx context.Context, groupID uint64) error {
	g := h.group(groupID)
	if g == nil {
		return fmt.Errorf("group %d: %w", groupID, ErrNoGroup)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	if !g.queueRead(done) {
		return fmt.Errorf("group %d: %w: %w", groupID, store.ErrNotLeader, ErrStopped)
	}
	h.sched.enqueue(groupID)
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		// The buffered channel takes the answer nobody waits for; the
		// batch it belongs to ends with the term at the latest.
		return ctx.Err()
	}
}

// readBatch is the reads one ReadIndex request of raft serves: every
// read that arrived while the worker was busy shares the round of
// heartbeats that confirms the leadership.
type readBatch struct {
	rctx    uint64 // the request context raft gives back in its ReadState
	term    uint64 // the lease the batch was asked under
	index   uint64 // the read index, once answered
	waiters []chan error
}

// queueRead adds a read for the worker; false once the host stopped.
func (g *group) queueRead(done chan error) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.reads = append(g.reads, done)
	return true
}

// startReads asks raft for one read index for the reads waiting. A
// replica that does not lead refuses them. A leader without a lease
// keeps them until it has one: before its first entry is applied its
// state may lack entries earlier leaders committed, and raft would hold
// such a request itself, then lose it without a word if the leader
// stepped down.
func (g *group) startReads() {
	g.mu.Lock()
	g.heldReads = append(g.heldReads, g.reads...)
	g.reads = nil
	g.mu.Unlock()
	if len(g.heldReads) == 0 {
		return
	}
	st := g.rn.BasicStatus()
	if st.RaftState != raft.StateLeader {
		finishAll(g.heldReads, fmt.Errorf("%w: group %d, replica %d, leader replica %d",
			store.ErrNotLeader, g.id, g.replica, st.Lead))
		g.heldReads = nil
		return
	}
	term := g.lease.Load()
	if term == 0 {
		return
	}
	g.readSeq++
	b := &readBatch{rctx: g.readSeq, term: term, waiters: g.heldReads}
	g.heldReads = nil
	g.readBatches = append(g.readBatches, b)
	g.rn.ReadIndex(binary.BigEndian.AppendUint64(nil, b.rctx))
}

// readIndexes records the read indexes a Ready answered.
func (g *group) readIndexes(rd raft.Ready) {
	for _, rs := range rd.ReadStates {
		if len(rs.RequestCtx) != 8 {
			continue
		}
		rctx := binary.BigEndian.Uint64(rs.RequestCtx)
		for _, b := range g.readBatches {
			if b.rctx == rctx {
				b.index = rs.Index
			}
		}
	}
}

// serveReads answers the batches whose read index this replica applied.
func (g *group) serveReads() {
	applied := g.log.Applied()
	kept := g.readBatches[:0]
	for _, b := range g.readBatches {
		if b.index != 0 && b.index <= applied {
			finishAll(b.waiters, nil)
			continue
		}
		kept = append(kept, b)
	}
	clear(g.readBatches[len(kept):])
	g.readBatches = kept
}

// dropReads refuses the batches asked under a lease that ended; term 0:
// every read, asked or not (the host stopped or the group failed).
func (g *group) dropReads(term uint64, err error) {
	kept := g.readBatches[:0]
	for _, b := range g.readBatches {
		if term == 0 || b.term == term {
			finishAll(b.waiters, err)
			continue
		}
		kept = append(kept, b)
	}
	clear(g.readBatches[len(kept):])
	g.readBatches = kept
	if term == 0 {
		g.mu.Lock()
		g.heldReads = append(g.heldReads, g.reads...)
		g.reads = nil
		g.mu.Unlock()
		finishAll(g.heldReads, err)
		g.heldReads = nil
	}
}

func finishAll(waiters []chan error, err error) {
	for _, w := range waiters {
		w <- err
	}
}
