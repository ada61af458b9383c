package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// StateMachine applies a group's committed commands in log order, the
// same on every replica: it must decide from the command alone, never
// from its replica's clock or state the others lack.
type StateMachine interface {
	// Apply applies the command committed at index, in an entry of term.
	// A machine that saves index as applied in the batch of the
	// command's own change (store.ApplyCommand does) never applies a
	// command twice; for one that does not, the group saves the applied
	// index after the Ready's entries, and a crash between applies them
	// again. An error wrapping store.ErrProposalDropped means the
	// command was refused, deterministically, and is told to its
	// proposer; any other error stops the group on this replica (it
	// neither skips the command nor goes on).
	Apply(ctx context.Context, index, term uint64, cmd []byte) error
}

// storeMachine applies the store's commands (store.Command): the state
// machine of a group whose GroupConfig names no other.
type storeMachine struct{ s *store.Store }

func (m storeMachine) Apply(ctx context.Context, index, term uint64, cmd []byte) error {
	return m.s.ApplyCommand(ctx, index, term, cmd)
}

// ErrGroupFailed reports a group stopped on this replica by an error of
// its log or state machine; the error it stopped on is wrapped.
var ErrGroupFailed = errors.New("replica group failed")

// idSize is the proposal ID in front of every command in the log, by
// which the replica that proposed it knows its command was applied.
const idSize = 8

// proposal is a command waiting to be proposed, then applied.
type proposal struct {
	id  uint64
	cmd []byte
	// term is the lease a store command was evaluated under: it is
	// proposed only while this replica still leads in it. 0: a command
	// of Host.Propose, forwarded to the leader from any replica.
	term uint64
	// conf, when set, is a membership change (membership.go) rather
	// than a command.
	conf *raftpb.ConfChangeV2
	// proposed: handed to raft (worker only; close reads it once the
	// workers stopped).
	proposed bool
	done     chan error // buffered: finishing never blocks
	start    time.Time  // when it was handed to the host
}

// group is one replica of one shard's Raft group on this host.
type group struct {
	id      uint64
	replica uint64
	logger  *slog.Logger
	// log is the store's Raft log, and storage the same log as the
	// RawNode reads it: both change only when a snapshot replaces the
	// store (snapshot.go), by the worker holding rnMu, log also under
	// mu, so that other goroutines read it with raftLog.
	log     *store.RaftLog
	storage logStorage
	sm      StateMachine
	host    *Host
	// Snapshots (snapshot.go): sending holds the followers a snapshot
	// is being sent to and snapIn one received (both guarded by mu);
	// staged is the one stepped into raft (the worker's); receiving is
	// held while one arrives.
	sending   map[uint64]bool
	snapIn    *staged
	staged    *staged
	receiving sync.Mutex
	// folder is where the store lives, for snapshots; nil: this replica
	// neither sends nor receives them, and keeps its log until a purge.
	folder *Folder
	keep   uint64 // Config.LogKeep
	// maxBytes is Config.LogMaxBytes, and bytes the sizes of the log's
	// entries (logbytes.go; the worker's).
	maxBytes uint64
	bytes    logBytes

	// The eraser (truncate.go). eraseMu is held by an erase under way;
	// erasing and erasePending are guarded by mu; bg runs the eraser
	// (nil until the host started); eraseChecked is the worker's.
	eraseMu      sync.Mutex
	erasing      bool
	erasePending bool
	eraseChecked bool
	bg           *sync.WaitGroup
	// behindPurge is, on the leader, the replicas whose log has not
	// reached the last purge this replica applied (down or behind): they
	// owe its erase and cannot say so themselves. 0 on a follower.
	behindPurge atomic.Int64
	// erasedBy is the index each replica reported it erased through
	// (erasereport.go); guarded by mu.
	erasedBy map[uint64]uint64
	st       *store.Store // guarded by mu

	// mu guards what any goroutine hands the group: messages, ticks,
	// proposals, and the proposals waiting to be applied.
	mu      sync.Mutex
	inbox   []*raftpb.Message
	ticks   int
	props   []*proposal
	waiting map[uint64]*proposal
	reports []func(*raft.RawNode) // the transport's reports (leadership.go)
	reads   []chan error          // reads not yet seen by the worker (read.go)
	closed  bool                  // the host stopped: nothing more is proposed

	// lease is the term this replica leads in once it applied an entry
	// of that term, and with it every entry of earlier ones; 0 when it
	// does not (store.Proposer.Lease). Written by the worker (setLease),
	// under mu with leaseEnd.
	lease atomic.Uint64
	// leaseEnd is closed when the lease of the current term ends; nil
	// while there is none. Guarded by mu.
	leaseEnd chan struct{}
	// leaderChanges counts the leaders this replica saw elected.
	leaderChanges atomic.Uint64
	metrics       *metrics

	// rnMu is held by the worker handling the group, for the whole of
	// it: the RawNode is not safe for concurrent use. Lock order: rnMu,
	// then mu.
	rnMu   sync.Mutex
	rn     *raft.RawNode
	failed error            // guarded by rnMu
	seen   Leadership       // the last one told to onLead; guarded by rnMu
	onLead func(Leadership) // nil: nobody listens
	// onLease is told each start and end of the lease (setLease); nil:
	// nobody listens.
	onLease func(LeaseChange)
	// appliedTerm is the term of the last entry applied; guarded by rnMu.
	appliedTerm uint64
	// confID is the membership change this replica proposed and has not
	// applied (0: none); removed: it applied its own removal. Both
	// guarded by rnMu (membership.go).
	confID  uint64
	removed bool
	// retired runs the replica's retirement once (membership.go).
	retired sync.Once
	// Reads (read.go), guarded by rnMu: those waiting for a lease, those
	// asked of raft, and the last request context used.
	heldReads   []chan error
	readBatches []*readBatch
	readSeq     uint64
}

// raftLog is log for goroutines other than the worker's (status,
// metrics), which a snapshot's install may replace meanwhile.
func (g *group) raftLog() *store.RaftLog {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.log
}

// take empties the inbox.
func (g *group) take() (msgs []*raftpb.Message, ticks int, props []*proposal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	msgs, ticks, props = g.inbox, g.ticks, g.props
	g.inbox, g.ticks, g.props = nil, 0, nil
	return msgs, ticks, props
}

// queue adds p to the proposals to hand raft; false once the host
// stopped.
func (g *group) queue(p *proposal) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.props = append(g.props, p)
	g.waiting[p.id] = p
	return true
}

// finish tells the waiting proposer of id, if it is on this replica.
func (g *group) finish(id uint64, err error) {
	g.mu.Lock()
	p := g.waiting[id]
	delete(g.waiting, id)
	g.mu.Unlock()
	if p != nil {
		if err == nil {
			g.metrics.applied(p)
		}
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
			g.finish(p.id, g.failedFor(p))
		}
		g.dropReads(0, fmt.Errorf("%w: %w", store.ErrNotLeader, g.failed))
		g.dropSnapshot()
		return
	}
	for _, r := range g.takeReports() {
		r(g.rn)
	}
	for range ticks {
		g.rn.Tick()
	}
	defer g.endStaged(nil) // a snapshot raft did not need
	for _, m := range msgs {
		if m.GetType() == raftpb.MessageType_MsgSnap {
			continue // it comes with its state (ReceiveSnapshot)
		}
		// A message of a removed peer or a stale local one is refused;
		// raft copes with lost messages, so there is nothing to do.
		_ = g.rn.Step(m)
	}
	g.stepSnapshot()
	// The messages may have ended the lease: proposals see the current one.
	g.renewLease()
	for _, p := range props {
		g.propose(p)
	}
	g.startReads()
	for g.rn.HasReady() {
		if err := g.handleReady(ctx, tr); err != nil {
			g.fail(err)
			return
		}
		if g.removed {
			g.fail(ErrRemoved)
			g.mu.Lock()
			bg := g.bg
			g.mu.Unlock()
			bg.Go(func() { g.host.retire(g) })
			return
		}
		// An applied entry of a new term starts the lease, which reads
		// held for it wait for.
		g.renewLease()
		g.startReads()
	}
	g.renewLease()
	g.countBehindPurge()
}

// propose hands p to raft. A store command goes in only while the lease
// it was evaluated under holds: raft then appends it in that term, on
// this replica, and the command's term check at apply passes.
func (g *group) propose(p *proposal) {
	if p.term != 0 && g.lease.Load() != p.term {
		g.finish(p.id, fmt.Errorf("%w: group %d, replica %d, leader replica %d",
			store.ErrNotLeader, g.id, g.replica, g.rn.BasicStatus().Lead))
		return
	}
	if p.conf != nil {
		g.proposeConf(p)
		return
	}
	cmd := binary.BigEndian.AppendUint64(make([]byte, 0, idSize+len(p.cmd)), p.id)
	if err := g.rn.Propose(append(cmd, p.cmd...)); err != nil {
		if p.term != 0 {
			err = fmt.Errorf("%w: %w", store.ErrProposalDropped, err)
		}
		g.finish(p.id, fmt.Errorf("propose: %w", err))
		return
	}
	p.proposed = true
}

// renewLease sets the lease from raft's state: the current term while
// this replica leads and has applied an entry of it (a new leader's
// first entry, which commits every earlier one). A lease once lost never
// comes back (a term has one leader, and a leader that steps down does
// not lead that term again), so the store commands proposed under it and
// not yet applied are told their outcome is unknown: their stripes are
// let go, and no write is evaluated here before this replica applied
// whatever became of them.
func (g *group) renewLease() {
	st := g.rn.BasicStatus()
	var lease uint64
	if st.RaftState == raft.StateLeader && g.appliedTerm == st.GetTerm() {
		lease = st.GetTerm()
	}
	if old := g.setLease(lease); old != 0 && old != lease {
		g.confID = 0 // a change of that term is dropped with the rest
		g.drop(func(p *proposal) bool { return p.term == old && p.proposed },
			fmt.Errorf("%w: replica %d stopped leading group %d in term %d", store.ErrAmbiguous, g.replica, g.id, old))
		g.dropReads(old, fmt.Errorf("%w: replica %d stopped leading group %d in term %d", store.ErrNotLeader, g.replica, g.id, old))
	}
}

// setLease sets the lease to term and returns the one before; the end
// of a lease closes its leaseEnd, and the change is told to onLease.
// Its callers are the worker and the host's stop, one at a time.
func (g *group) setLease(term uint64) uint64 {
	if old := g.lease.Load(); old == term {
		return old
	}
	g.mu.Lock()
	old := g.lease.Swap(term)
	if g.leaseEnd != nil {
		close(g.leaseEnd)
		g.leaseEnd = nil
	}
	if term != 0 {
		g.leaseEnd = make(chan struct{})
	}
	g.mu.Unlock()
	if g.onLease != nil {
		g.onLease(LeaseChange{Group: g.id, Replica: g.replica, Term: term})
	}
	return old
}

// drop finishes every waiting proposal that match selects with err.
func (g *group) drop(match func(*proposal) bool, err error) {
	g.mu.Lock()
	var gone []*proposal
	for id, p := range g.waiting {
		if match(p) {
			gone = append(gone, p)
			delete(g.waiting, id)
		}
	}
	g.mu.Unlock()
	for _, p := range gone {
		p.done <- err
	}
}

// handleReady persists, sends, applies and advances, in the order raft
// requires without async storage writes: nothing leaves the replica
// before the log and hard state it depends on are on disk.
func (g *group) handleReady(ctx context.Context, tr Transport) error {
	rd := g.rn.Ready()
	if !raft.IsEmptySnap(rd.Snapshot) {
		// The snapshot's install saves the Ready's log and hard state.
		if err := g.install(ctx, rd); err != nil {
			return fmt.Errorf("install snapshot: %w", err)
		}
	} else if len(rd.Entries) > 0 || rd.HardState != nil {
		u := store.RaftUpdate{Entries: rd.Entries, HardState: rd.HardState, Sync: rd.MustSync}
		if err := g.log.Save(ctx, u); err != nil {
			return fmt.Errorf("save log: %w", err)
		}
	}
	g.observe(rd)
	if msgs := g.sendSnapshots(ctx, tr, rd.Messages); len(msgs) > 0 {
		tr.Send(g.id, msgs)
	}
	g.readIndexes(rd)
	if err := g.apply(ctx, rd.CommittedEntries); err != nil {
		return err
	}
	g.serveReads()
	if len(rd.CommittedEntries) > 0 {
		if err := g.truncate(ctx); err != nil {
			return err
		}
	}
	g.rn.Advance(rd)
	return nil
}

// store is the replica's current store.
func (g *group) store() *store.Store {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.st
}

// logStorage is the log as the RawNode reads it (raft.Storage), which a
// snapshot's install points at the new store's log.
type logStorage struct{ *store.RaftLog }

// apply applies committed entries in order. A conf change's membership
// is saved with its index at once, before any later command is applied;
// the index of entries that are no command is saved after them.
func (g *group) apply(ctx context.Context, ents []*raftpb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	for _, e := range ents {
		if err := g.applyEntry(ctx, e); err != nil {
			return err
		}
		g.appliedTerm = e.GetTerm()
		g.bytes.note(e.GetIndex(), uint64(proto.Size(e)))
	}
	if last := ents[len(ents)-1].GetIndex(); g.log.Applied() < last {
		if err := g.log.Save(ctx, store.RaftUpdate{Applied: last}); err != nil {
			return fmt.Errorf("save applied index: %w", err)
		}
	}
	return nil
}

func (g *group) applyEntry(ctx context.Context, e *raftpb.Entry) error {
	var cc raftpb.ConfChangeI
	switch e.GetType() {
	case raftpb.EntryType_EntryNormal:
		if len(e.GetData()) < idSize { // a new leader's empty entry
			return nil
		}
		id := binary.BigEndian.Uint64(e.GetData())
		if e.GetIndex() <= g.log.Applied() {
			// In the state a snapshot brought, which was taken at or
			// after the snapshot point raft goes on from.
			g.finish(id, nil)
			return nil
		}
		if id == reportID {
			g.applyReport(e.GetData()[idSize:])
			return nil
		}
		err := g.sm.Apply(ctx, e.GetIndex(), e.GetTerm(), e.GetData()[idSize:])
		g.finish(id, err)
		if err != nil && !errors.Is(err, store.ErrProposalDropped) {
			return fmt.Errorf("apply entry %d: %w", e.GetIndex(), err)
		}
		return nil
	case raftpb.EntryType_EntryConfChange:
		v1 := &raftpb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), v1); err != nil {
			return fmt.Errorf("conf change at %d: %w", e.GetIndex(), err)
		}
		cc = v1
	case raftpb.EntryType_EntryConfChangeV2:
		v2 := &raftpb.ConfChangeV2{}
		if err := proto.Unmarshal(e.GetData(), v2); err != nil {
			return fmt.Errorf("conf change at %d: %w", e.GetIndex(), err)
		}
		cc = v2
	default:
		return nil
	}
	cs := g.rn.ApplyConfChange(cc)
	// Never below a snapshot's state, which may be ahead of raft.
	applied := max(e.GetIndex(), g.log.Applied())
	if err := g.log.Save(ctx, store.RaftUpdate{Applied: applied, ConfState: cs}); err != nil {
		return fmt.Errorf("save membership at %d: %w", e.GetIndex(), err)
	}
	return g.appliedConf(ctx, cc)
}

// failedFor is the error a proposal meets on a failed group: a store
// command may have been committed before the failure.
func (g *group) failedFor(p *proposal) error {
	if p.term != 0 {
		return fmt.Errorf("%w: %w", store.ErrAmbiguous, g.failed)
	}
	return g.failed
}

// close stops proposals once the host stopped: a proposal not yet handed
// to raft never will be; one in flight may still be applied, later.
func (g *group) close() {
	g.mu.Lock()
	g.closed = true
	waiting := g.waiting
	g.props, g.waiting = nil, make(map[uint64]*proposal)
	g.mu.Unlock()
	g.setLease(0)
	g.dropReads(0, fmt.Errorf("%w: the replica host of group %d stopped", store.ErrNotLeader, g.id))
	for _, p := range waiting {
		if !p.proposed {
			p.done <- fmt.Errorf("%w: the replica host of group %d stopped", store.ErrNotLeader, g.id)
		} else {
			p.done <- fmt.Errorf("%w: the replica host of group %d stopped", store.ErrAmbiguous, g.id)
		}
	}
}

// fail stops the group on this replica and fails every waiting proposal.
func (g *group) fail(err error) {
	g.failed = fmt.Errorf("%w: group %d replica %d: %w", ErrGroupFailed, g.id, g.replica, err)
	// A stopped replica serves nothing until its node restarts, so an
	// operator must see why (a disk error, or a command from a newer
	// release this binary cannot apply: docs/upgrading.md).
	if !errors.Is(err, ErrRemoved) { // logged where the removal is handled
		g.logger.Error("replica_group_failed", "group", g.id, "replica", g.replica, "err", err)
	}
	g.stopLeading()
	g.setLease(0)
	g.dropReads(0, fmt.Errorf("%w: %w", store.ErrNotLeader, g.failed))
	g.mu.Lock()
	waiting := g.waiting
	g.waiting = make(map[uint64]*proposal)
	g.mu.Unlock()
	for _, p := range waiting {
		p.done <- g.failedFor(p)
	}
}
