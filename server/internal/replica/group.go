package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// StateMachine applies a group's committed commands in log order, the
// same on every replica: it must decide from the command alone, never
// from its replica's clock or state the others lack.
type StateMachine interface {
	// Apply applies the command committed at index. An error stops the
	// group on this replica (it neither skips the command nor goes on).
	Apply(ctx context.Context, index uint64, cmd []byte) error
}

// ErrGroupFailed reports a group stopped on this replica by an error of
// its log or state machine; the error it stopped on is wrapped.
var ErrGroupFailed = errors.New("replica group failed")

// ErrSnapshotNotBuilt stops a group that was sent a snapshot: catching up
// by snapshot comes with the backup stream (docs/replication-design.md
// §7). Until then logs are never truncated, so no leader sends one.
var ErrSnapshotNotBuilt = errors.New("catching up by snapshot is not built")

// idSize is the proposal ID in front of every command in the log, by
// which the replica that proposed it knows its command was applied.
const idSize = 8

// proposal is a command waiting to be proposed, then applied.
type proposal struct {
	id   uint64
	cmd  []byte
	done chan error // buffered: finishing never blocks
}

// group is one replica of one shard's Raft group on this host.
type group struct {
	id      uint64
	replica uint64
	log     *store.RaftLog
	sm      StateMachine

	// mu guards what any goroutine hands the group: messages, ticks,
	// proposals, and the proposals waiting to be applied.
	mu      sync.Mutex
	inbox   []*raftpb.Message
	ticks   int
	props   []*proposal
	waiting map[uint64]*proposal
	reports []func(*raft.RawNode) // the transport's reports (leadership.go)

	// rnMu is held by the worker handling the group, for the whole of
	// it: the RawNode is not safe for concurrent use. Lock order: rnMu,
	// then mu.
	rnMu   sync.Mutex
	rn     *raft.RawNode
	failed error            // guarded by rnMu
	seen   Leadership       // the last one told to onLead; guarded by rnMu
	onLead func(Leadership) // nil: nobody listens
}

// take empties the inbox.
func (g *group) take() (msgs []*raftpb.Message, ticks int, props []*proposal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	msgs, ticks, props = g.inbox, g.ticks, g.props
	g.inbox, g.ticks, g.props = nil, 0, nil
	return msgs, ticks, props
}

// finish tells the waiting proposer of id, if it is on this replica.
func (g *group) finish(id uint64, err error) {
	g.mu.Lock()
	p := g.waiting[id]
	delete(g.waiting, id)
	g.mu.Unlock()
	if p != nil {
		p.done <- err
	}
}

// forget drops a proposal whose proposer stopped waiting.
func (g *group) forget(id uint64) {
	g.mu.Lock()
	delete(g.waiting, id)
	g.mu.Unlock()
}

// process steps the group through everything its inbox holds and handles
// its Ready until it has none.
func (g *group) process(ctx context.Context, tr Transport) {
	g.rnMu.Lock()
	defer g.rnMu.Unlock()
	msgs, ticks, props := g.take()
	if g.failed != nil {
		for _, p := range props {
			g.finish(p.id, g.failed)
		}
		return
	}
	for _, r := range g.takeReports() {
		r(g.rn)
	}
	for range ticks {
		g.rn.Tick()
	}
	for _, m := range msgs {
		// A message of a removed peer or a stale local one is refused;
		// raft copes with lost messages, so there is nothing to do.
		_ = g.rn.Step(m)
	}
	for _, p := range props {
		cmd := binary.BigEndian.AppendUint64(make([]byte, 0, idSize+len(p.cmd)), p.id)
		if err := g.rn.Propose(append(cmd, p.cmd...)); err != nil {
			g.finish(p.id, fmt.Errorf("propose: %w", err))
		}
	}
	for g.rn.HasReady() {
		if err := g.handleReady(ctx, tr); err != nil {
			g.fail(err)
			return
		}
	}
}

// handleReady persists, sends, applies and advances, in the order raft
// requires without async storage writes: nothing leaves the replica
// before the log and hard state it depends on are on disk.
func (g *group) handleReady(ctx context.Context, tr Transport) error {
	rd := g.rn.Ready()
	if !raft.IsEmptySnap(rd.Snapshot) {
		return ErrSnapshotNotBuilt
	}
	if len(rd.Entries) > 0 || rd.HardState != nil {
		u := store.RaftUpdate{Entries: rd.Entries, HardState: rd.HardState, Sync: rd.MustSync}
		if err := g.log.Save(ctx, u); err != nil {
			return fmt.Errorf("save log: %w", err)
		}
	}
	g.observe(rd)
	if len(rd.Messages) > 0 {
		tr.Send(g.id, rd.Messages)
	}
	if err := g.apply(ctx, rd.CommittedEntries); err != nil {
		return err
	}
	g.rn.Advance(rd)
	return nil
}

// apply applies committed entries in order and saves the applied index
// (with the membership, when it changed). The index is saved after the
// state machine's writes, unsynced: a crash between them applies the
// entries again, so until commands write their applied index in their
// own batch (design §5) a state machine must take a repeat.
func (g *group) apply(ctx context.Context, ents []*raftpb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	var cs *raftpb.ConfState
	for _, e := range ents {
		switch e.GetType() {
		case raftpb.EntryType_EntryNormal:
			if len(e.GetData()) < idSize { // a new leader's empty entry
				continue
			}
			id := binary.BigEndian.Uint64(e.GetData())
			if err := g.sm.Apply(ctx, e.GetIndex(), e.GetData()[idSize:]); err != nil {
				g.finish(id, err)
				return fmt.Errorf("apply entry %d: %w", e.GetIndex(), err)
			}
			g.finish(id, nil)
		case raftpb.EntryType_EntryConfChange:
			cc := &raftpb.ConfChange{}
			if err := proto.Unmarshal(e.GetData(), cc); err != nil {
				return fmt.Errorf("conf change at %d: %w", e.GetIndex(), err)
			}
			cs = g.rn.ApplyConfChange(cc)
		case raftpb.EntryType_EntryConfChangeV2:
			cc := &raftpb.ConfChangeV2{}
			if err := proto.Unmarshal(e.GetData(), cc); err != nil {
				return fmt.Errorf("conf change at %d: %w", e.GetIndex(), err)
			}
			cs = g.rn.ApplyConfChange(cc)
		}
	}
	u := store.RaftUpdate{Applied: ents[len(ents)-1].GetIndex(), ConfState: cs}
	if err := g.log.Save(ctx, u); err != nil {
		return fmt.Errorf("save applied index: %w", err)
	}
	return nil
}

// fail stops the group on this replica and fails every waiting proposal.
func (g *group) fail(err error) {
	g.failed = fmt.Errorf("%w: group %d replica %d: %w", ErrGroupFailed, g.id, g.replica, err)
	g.stopLeading()
	g.mu.Lock()
	waiting := g.waiting
	g.waiting = make(map[uint64]*proposal)
	g.mu.Unlock()
	for _, p := range waiting {
		p.done <- g.failed
	}
}
