package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/backup"
)

// Growing a shard of one copy into a Raft group (spec §15, `cluster
// set-replicas 3` on a cluster of one replica per shard;
// docs/replication-design.md §8). Once the map asks for more replicas,
// the shard's home, which owns it, switches it: it stops the owner's
// writes (frozen, as a move does), and in one etcd transaction, valid
// only while its ownership stands, gives the shard a set (its own
// replica, a first voter, and the others added) and deletes the
// ownership key. From that commit on the shard is a group, whatever
// happens to the node: its store is fenced against the owner's last
// writes in flight, its owned services stop, and its replica starts as
// the one voter of a new group whose first state is the store as it is
// (nothing rewritten). The group's leader then adds the other replicas
// as learners, caught up by snapshot (Reconciler). A node killed before
// the commit starts again owning the shard and switches it again; one
// killed after starts its replica from the map.

// GrowerOptions are what a node needs to switch its shards.
type GrowerOptions struct {
	Client *clientv3.Client
	Keys   Keys
	Node   string
	Owner  *Owner
	Shards *Shards
	// Holder returns shard n's retention service, held during the switch
	// so that no purge is half done when the owner's writes stop.
	Holder func(n int) (backup.Holder, bool)
	// Detach stops what runs for an owned shard (its retention service,
	// its backups) before its group starts.
	Detach func(n int)
	// Start runs this node's replica r of shard n over its open store as
	// a first voter of a new group (voters: the set's first voters).
	Start func(ctx context.Context, n int, r Replica, voters []uint64) error
	// Running reports whether this node already runs a group of shard n.
	Running func(n int) bool
	Logger  *slog.Logger
}

// Grower switches the shards a node owns into groups.
type Grower struct {
	o GrowerOptions

	mu      sync.Mutex
	pending map[int]*switching // guarded by mu: switches not finished
}

// switching is a switch begun: the shard frozen and its retention held,
// the transaction's outcome unknown or the steps after it not all done.
type switching struct {
	epoch   int64
	release func()
	once    sync.Once
}

func (s *switching) releaseHold() { s.once.Do(s.release) }

// NewGrower returns a node's Grower; the Reconciler drives it (Step).
func NewGrower(o GrowerOptions) *Grower {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Grower{o: o, pending: map[int]*switching{}}
}

// Step makes shard n's next step of a switch, as m (the shard map read
// now) asks: switch a shard this node owns and m wants grouped, or
// finish or undo a switch begun here.
func (g *Grower) Step(ctx context.Context, m Map, n int) error {
	g.mu.Lock()
	p := g.pending[n]
	g.mu.Unlock()
	switch {
	case p != nil && m.Grouped(n):
		return g.finish(ctx, m, n, p)
	case p != nil:
		// The transaction did not commit after all: owned as before.
		g.forget(n)
		p.releaseHold()
		g.o.Owner.Thaw(n)
		return nil
	case m.Growing(n) && m.Homes[n] == g.o.Node:
		return g.grow(ctx, n)
	}
	return nil
}

func (g *Grower) forget(n int) {
	g.mu.Lock()
	delete(g.pending, n)
	g.mu.Unlock()
}

// grow switches shard n, owned here, into a group.
func (g *Grower) grow(ctx context.Context, n int) error {
	if _, ok := g.o.Shards.Store(n); !ok {
		return fmt.Errorf("shard %d: node %s does not hold it", n, g.o.Node)
	}
	// Not owned now (lost, not taken yet, being moved): the next look.
	epoch, err := g.o.Owner.Epoch(n)
	if err != nil {
		return err
	}
	holder, ok := g.o.Holder(n)
	if !ok {
		return fmt.Errorf("shard %d: no retention service", n)
	}
	live, err := LiveNodes(ctx, g.o.Client, g.o.Keys)
	if err != nil {
		return err
	}
	g.o.Owner.Freeze(n)
	_, release, err := holder.Hold(ctx)
	if err != nil {
		g.o.Owner.Thaw(n)
		return fmt.Errorf("shard %d: hold retention: %w", n, err)
	}
	p := &switching{epoch: epoch, release: release}
	owner := g.o.Keys.ShardOwner(n)
	m, _, err := changeMapIf(ctx, g.o.Client, g.o.Keys,
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(owner), "=", epoch)},
		[]clientv3.Op{clientv3.OpDelete(owner)},
		func(m *Map, newID func() uint64) (bool, error) {
			if !m.Growing(n) || m.Homes[n] != g.o.Node {
				return false, fmt.Errorf("%w: shard %d is no longer to be switched by %s", ErrMembershipChange, n, g.o.Node)
			}
			return true, placeGroup(m, n, live, newID)
		})
	switch {
	case errors.Is(err, errOutcomeUnknown):
		// Committed or not: the next look reads the map and decides,
		// the shard frozen meanwhile.
		g.mu.Lock()
		g.pending[n] = p
		g.mu.Unlock()
		return fmt.Errorf("switch shard %d: %w", n, err)
	case err != nil:
		// Not committed: owned as before.
		release()
		g.o.Owner.Thaw(n)
		return fmt.Errorf("switch shard %d: %w", n, err)
	}
	g.o.Logger.Info("cluster_shard_grouped", "shard", n, "epoch", epoch, "set", m.Sets[n])
	g.mu.Lock()
	g.pending[n] = p
	g.mu.Unlock()
	return g.finish(ctx, m, n, p)
}

// placeGroup gives shard n, owned by its home, a set: the home's replica
// first, the only first voter (its store is the group's first state),
// then ReplicaCount-1 replicas added on the live nodes holding fewest.
func placeGroup(m *Map, n int, live []string, newID func() uint64) error {
	if m.Sets == nil {
		m.Sets = make([][]Replica, m.Shards)
	}
	m.Sets[n] = []Replica{{ID: newID(), Node: m.Homes[n]}}
	for len(m.Sets[n]) < m.ReplicaCount() {
		to, ok := placeOne(m, n, live)
		if !ok {
			m.Sets[n] = nil
			return fmt.Errorf("%w: no live node without a replica of shard %d", ErrReplicaCount, n)
		}
		m.Sets[n] = append(m.Sets[n], Replica{ID: newID(), Node: to, Added: true})
	}
	return nil
}

// finish does what follows the switch's commit, each step again until
// all succeeded: the ownership given up, the store fenced above the
// owner's epoch (a write of the owner still in flight is refused, never
// applied beside the group's), the owned services stopped, the replica
// started.
func (g *Grower) finish(ctx context.Context, m Map, n int, p *switching) error {
	g.o.Owner.Drop(n) // its key went with the switch: nothing routes to it
	st, ok := g.o.Shards.Store(n)
	if !ok {
		return fmt.Errorf("shard %d: node %s does not hold it", n, g.o.Node)
	}
	if err := st.RaiseFence(ctx, p.epoch+1); err != nil {
		return fmt.Errorf("shard %d: fence the owner's writes: %w", n, err)
	}
	p.releaseHold()
	g.o.Detach(n)
	r, ok := m.ReplicaOn(n, g.o.Node)
	if !ok {
		return fmt.Errorf("shard %d: the map names no replica on %s", n, g.o.Node)
	}
	if !g.o.Running(n) {
		if err := g.o.Start(ctx, n, r, m.Voters(n)); err != nil {
			return fmt.Errorf("shard %d: start its group: %w", n, err)
		}
	}
	g.forget(n)
	// The owner keeps the shard frozen: a request routed by a view that
	// has not seen the switch yet is asked to retry.
	g.o.Logger.Info("cluster_shard_group_started", "shard", n, "replica", r.ID, "voters", m.Voters(n))
	return nil
}
