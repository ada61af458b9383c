package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/progressdb/progressdb/server/internal/startstop"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Defaults (docs/replication-design.md §2): a 2 s election timeout, which
// raft randomizes to 2–4 s, and heartbeats every tick.
const (
	DefaultTick           = 100 * time.Millisecond
	DefaultElectionTicks  = 20
	DefaultHeartbeatTicks = 1
	maxWorkers            = 8
	maxSizePerMsg         = 1 << 20
	maxInflightMsgs       = 256
	maxUncommitted        = 64 << 20
)

// ErrNoGroup reports a group this host has no replica of.
var ErrNoGroup = errors.New("no replica of this group on this host")

// ErrStopped refuses a proposal to a host that stopped.
var ErrStopped = errors.New("replica host stopped")

// Transport carries a group's messages to the hosts of their recipients
// (raftpb.Message.To, a replica ID). It must not block: a message it
// cannot send now is dropped, and raft sends again.
type Transport interface {
	Send(group uint64, msgs []*raftpb.Message)
}

// Config is a host's settings; zero fields take the defaults.
type Config struct {
	Transport      Transport
	Tick           time.Duration
	ElectionTicks  int
	HeartbeatTicks int
	// Workers handle groups with work, at most one worker per group at a
	// time (default GOMAXPROCS, at most 8).
	Workers int
	Logger  *slog.Logger
	// LogKeep is how many applied entries a replica whose group can send
	// snapshots keeps for slow followers (default DefaultLogKeep); a
	// purge drops the log up to itself whatever it says (truncate.go).
	LogKeep int
	// LogMaxBytes bounds the bytes of the applied entries such a replica
	// keeps (default DefaultLogMaxBytes): past it the log is trimmed to
	// half, keeping what a live follower still needs within it
	// (logbytes.go).
	LogMaxBytes int64
	// OnLeadership, when set, is told each change of a group's term or
	// leader as this host's replica sees it (the leader record in etcd
	// follows it). It is called by the group's worker: it must not block.
	OnLeadership func(Leadership)
	// OnLease, when set, is told each start and end of a lease of this
	// host's replicas (LeaseChange): the leader services of a node
	// follow it. Per group the changes come in order, from the group's
	// worker, or from Stop (every lease ends); it must neither block nor
	// call the host.
	OnLease func(LeaseChange)
	// Registerer, when set, registers the groups' metrics (metrics.go).
	Registerer prometheus.Registerer
	// OnRemoved, when set, is told that a replica of this host applied
	// its own removal, before its store is closed and its folder deleted
	// (membership.go): the caller stops using the store. It runs on its
	// own goroutine.
	OnRemoved func(group, replica uint64)
}

func (c Config) withDefaults() (Config, error) {
	if c.Transport == nil {
		return c, errors.New("replica: a host needs a transport")
	}
	if c.Tick <= 0 {
		c.Tick = DefaultTick
	}
	if c.ElectionTicks <= 0 {
		c.ElectionTicks = DefaultElectionTicks
	}
	if c.HeartbeatTicks <= 0 {
		c.HeartbeatTicks = DefaultHeartbeatTicks
	}
	if c.HeartbeatTicks >= c.ElectionTicks {
		return c, fmt.Errorf("replica: heartbeat ticks %d must be fewer than election ticks %d", c.HeartbeatTicks, c.ElectionTicks)
	}
	if c.Workers <= 0 {
		c.Workers = min(runtime.GOMAXPROCS(0), maxWorkers)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.LogKeep <= 0 {
		c.LogKeep = DefaultLogKeep
	}
	if c.LogMaxBytes <= 0 {
		c.LogMaxBytes = DefaultLogMaxBytes
	}
	return c, nil
}

// GroupConfig is one replica this host runs.
type GroupConfig struct {
	// Group is the shard number.
	Group uint64
	// Replica is this replica's Raft ID (never 0, never reused).
	Replica uint64
	// Peers are the group's first voters, this replica among them: used
	// only when the replica's log is new, ignored on a restart.
	Peers []uint64
	// Join: the replica was added to a running group (Host.AddLearner):
	// a new log stays empty until the leader's snapshot gives it the
	// group's state and membership, which needs a Folder. Only the first
	// voters bootstrap.
	Join bool
	// Store is the shard's database, which holds the log.
	Store *store.Store
	// Machine applies the group's commands. Nil: the store's own
	// (store.Command): AddGroup then makes the store's writes proposals
	// to this group (store.Replicate).
	Machine StateMachine
	// Folder, for a group applying its store's commands, is where the
	// store lives: the replica then sends and receives snapshots as the
	// backup stream and keeps its log bounded (snapshot.go).
	Folder *Folder
}

// Host runs the replicas one node has: a RawNode per group, one scheduler
// with a few workers, one ticker.
type Host struct {
	cfg     Config
	sched   *scheduler
	life    startstop.Base
	metrics *metrics
	// bg runs the groups' erasers and snapshot senders; Stop waits.
	bg sync.WaitGroup

	mu      sync.RWMutex
	groups  map[uint64]*group // guarded by mu
	started bool              // guarded by mu: the groups' bg is set
}

// NewHost returns a host with no groups; Start runs it.
func NewHost(cfg Config) (*Host, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	h := &Host{cfg: cfg, sched: newScheduler(), groups: make(map[uint64]*group)}
	h.metrics = newMetrics(h)
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(h.metrics); err != nil {
			return nil, fmt.Errorf("replica: register metrics: %w", err)
		}
	}
	return h, nil
}

// Start runs the ticker and the workers until ctx ends or Stop.
func (h *Host) Start(ctx context.Context) {
	h.life.Start(ctx, nil, h.run)
}

// Stop stops the ticker and the workers and waits for them. The groups'
// stores stay open: they belong to the caller.
func (h *Host) Stop() { h.life.Stop() }

func (h *Host) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range h.cfg.Workers {
		wg.Go(func() {
			for {
				id, ok := h.sched.next()
				if !ok {
					return
				}
				if g := h.group(id); g != nil {
					g.process(ctx, h.cfg.Transport)
				}
			}
		})
	}
	h.mu.Lock()
	h.started = true
	for _, g := range h.groups {
		g.mu.Lock()
		g.bg = &h.bg
		g.mu.Unlock()
	}
	h.mu.Unlock()
	t := time.NewTicker(h.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			h.sched.stop()
			wg.Wait()
			h.bg.Wait()
			h.mu.RLock()
			for _, g := range h.groups {
				g.close()
			}
			h.mu.RUnlock()
			return
		case <-t.C:
			h.tick()
		}
	}
}

// tick counts a tick in every group; the workers apply it.
func (h *Host) tick() {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for id, g := range h.groups {
		g.mu.Lock()
		g.ticks++
		g.mu.Unlock()
		h.sched.enqueue(id)
	}
}

func (h *Host) group(id uint64) *group {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.groups[id]
}

// AddGroup starts a replica on this host from its store's log: a new log
// is bootstrapped with Peers as voters at index 1, an existing one goes
// on from its hard state and applied index.
func (h *Host) AddGroup(ctx context.Context, gc GroupConfig) error {
	if gc.Replica == 0 || gc.Store == nil {
		return fmt.Errorf("replica: group %d needs a replica ID and a store", gc.Group)
	}
	sm := gc.Machine
	if sm == nil {
		sm = storeMachine{gc.Store}
	}
	log, err := gc.Store.RaftLog(ctx)
	if err != nil {
		return fmt.Errorf("group %d: %w", gc.Group, err)
	}
	// Never another replica's log under this ID (store.ErrOtherReplica).
	if err := log.Claim(ctx, gc.Replica); err != nil {
		return fmt.Errorf("group %d: %w", gc.Group, err)
	}
	switch {
	case gc.Join && (gc.Folder == nil || gc.Machine != nil):
		return fmt.Errorf("replica: group %d: a joining replica needs a folder and its store's commands, for its first snapshot", gc.Group)
	case !gc.Join:
		if err := bootstrap(ctx, log, gc.Peers); err != nil {
			return fmt.Errorf("group %d: %w", gc.Group, err)
		}
	}
	g := &group{id: gc.Group, replica: gc.Replica, log: log, storage: logStorage{log}, sm: sm, st: gc.Store,
		waiting: make(map[uint64]*proposal), erasedBy: make(map[uint64]uint64), onLead: h.cfg.OnLeadership, onLease: h.cfg.OnLease,
		folder: gc.Folder, keep: uint64(h.cfg.LogKeep), maxBytes: uint64(h.cfg.LogMaxBytes),
		logger: h.cfg.Logger, metrics: h.metrics, host: h, sending: make(map[uint64]bool)}
	if gc.Machine != nil {
		g.folder = nil // a snapshot is a store's state
	}
	rn, err := raft.NewRawNode(&raft.Config{
		ID: gc.Replica, ElectionTick: h.cfg.ElectionTicks, HeartbeatTick: h.cfg.HeartbeatTicks,
		Storage: &g.storage, Applied: log.Applied(), MaxSizePerMsg: maxSizePerMsg, MaxInflightMsgs: maxInflightMsgs,
		MaxUncommittedEntriesSize: maxUncommitted, CheckQuorum: true, PreVote: true, StepDownOnRemoval: true,
		Logger: raftLogger{h.cfg.Logger.With(slog.Uint64("group", gc.Group), slog.Uint64("replica", gc.Replica))},
	})
	if err != nil {
		return fmt.Errorf("group %d: start raft: %w", gc.Group, err)
	}
	g.rn = rn
	st := rn.BasicStatus()
	g.seen = Leadership{Group: gc.Group, Replica: gc.Replica, Term: st.GetTerm(), Leader: st.Lead}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.groups[gc.Group]; ok {
		return fmt.Errorf("replica: group %d already runs on this host", gc.Group)
	}
	h.groups[gc.Group] = g
	if h.started {
		g.bg = &h.bg
	}
	if gc.Machine == nil {
		gc.Store.Replicate(groupProposer{h: h, g: g})
	}
	return nil
}

// Proposer returns the group as its store's Proposer, for a store whose
// commands a Machine of the caller applies (GroupConfig.Machine; with
// none, AddGroup already gave the store its Proposer).
func (h *Host) Proposer(groupID uint64) (store.Proposer, error) {
	g := h.group(groupID)
	if g == nil {
		return nil, fmt.Errorf("group %d: %w", groupID, ErrNoGroup)
	}
	return groupProposer{h: h, g: g}, nil
}

// Lease returns the term in which this replica leads the group and may
// evaluate writes (store.Proposer.Lease); 0 when it may not.
func (h *Host) Lease(groupID uint64) uint64 {
	g := h.group(groupID)
	if g == nil {
		return 0
	}
	return g.lease.Load()
}

// groupProposer is a group as its store's Proposer.
type groupProposer struct {
	h *Host
	g *group
}

func (p groupProposer) Lease() uint64 { return p.g.lease.Load() }

func (p groupProposer) Propose(cmd store.Command) <-chan error {
	pr := &proposal{id: cmd.ID, term: cmd.Term, cmd: cmd.Encode(), done: make(chan error, 1), start: time.Now()}
	if !p.g.queue(pr) {
		pr.done <- fmt.Errorf("%w: the replica host of group %d stopped", store.ErrNotLeader, p.g.id)
		return pr.done
	}
	p.h.sched.enqueue(p.g.id)
	return pr.done
}

// bootstrap gives a new log its first membership: a snapshot point at
// index 1, term 1 that every first replica shares, applied, as raft
// recommends over RawNode.Bootstrap.
func bootstrap(ctx context.Context, log *store.RaftLog, peers []uint64) error {
	hs, cs, err := log.InitialState()
	if err != nil {
		return err
	}
	last, err := log.LastIndex()
	if err != nil {
		return err
	}
	if !raft.IsEmptyHardState(hs) || last > 0 || len(cs.GetVoters()) > 0 {
		return nil
	}
	if len(peers) == 0 {
		return errors.New("a new replica needs its group's first voters")
	}
	conf := &raftpb.ConfState{Voters: peers}
	snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1)), ConfState: conf}}
	return log.Save(ctx, store.RaftUpdate{Install: snap, HardState: &raftpb.HardState{Term: new(uint64(1)), Commit: new(uint64(1))},
		Applied: 1, ConfState: conf, Sync: true})
}

// Deliver hands a message from the transport to its group; a message for
// a group this host does not run, or for another replica of it (one this
// node's replica replaced), is dropped.
func (h *Host) Deliver(groupID uint64, m *raftpb.Message) {
	g := h.group(groupID)
	if g == nil || m.GetTo() != g.replica {
		return
	}
	g.mu.Lock()
	g.inbox = append(g.inbox, m)
	g.mu.Unlock()
	h.sched.enqueue(groupID)
}

// Propose proposes cmd to the group and returns once this replica applied
// it, which means a quorum has it on disk. A follower forwards it to the
// leader. raft.ErrProposalDropped (wrapped) when there is no leader to
// take it; a proposal lost in a leader change leaves Propose waiting
// until ctx ends. This is the path of an opaque StateMachine's commands;
// a store's writes are proposed by the store itself (store.Proposer),
// evaluated on the leader.
func (h *Host) Propose(ctx context.Context, groupID uint64, cmd []byte) error {
	g := h.group(groupID)
	if g == nil {
		return fmt.Errorf("group %d: %w", groupID, ErrNoGroup)
	}
	// Random: proposals of every replica share the log, and a collision
	// of 64 random bits would only wake the wrong waiter early.
	p := &proposal{id: proposalID(), cmd: cmd, done: make(chan error, 1), start: time.Now()}
	if !g.queue(p) {
		return fmt.Errorf("group %d: %w", groupID, ErrStopped)
	}
	h.sched.enqueue(groupID)
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		g.forget(p.id)
		return ctx.Err()
	}
}

// Store returns the group's store on this host: the one AddGroup was
// given until a snapshot replaced it (nil: no such group).
func (h *Host) Store(groupID uint64) *store.Store {
	g := h.group(groupID)
	if g == nil {
		return nil
	}
	return g.store()
}

// Status returns the group's Raft status on this replica: its term,
// leader, role, commit and applied index.
func (h *Host) Status(groupID uint64) (raft.BasicStatus, error) {
	g := h.group(groupID)
	if g == nil {
		return raft.BasicStatus{}, fmt.Errorf("group %d: %w", groupID, ErrNoGroup)
	}
	g.rnMu.Lock()
	defer g.rnMu.Unlock()
	if g.failed != nil {
		return g.rn.BasicStatus(), g.failed
	}
	return g.rn.BasicStatus(), nil
}
