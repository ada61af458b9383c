package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/startstop"
)

// The reconciler (docs/replication-design.md §8) runs on every node of a
// replicated cluster and acts for the shards whose group this node's
// replica leads: it moves the group's membership towards the shard's set
// one change at a time (add a learner, promote it once caught up, remove
// a replica leaving, take a removed one out of the set), and replaces
// the replicas of a node down longer than DeadAfter; through Grow, it
// also has this node switch the shards it owns into groups once the map
// asks for replicas (grow.go). It keeps no state
// of its own but when it first saw a node down: every step is decided
// again from the map in etcd and the group's applied membership, so a
// new leader takes up where the old one stopped.

// Defaults of the reconciler.
const (
	DefaultReconcileEvery = time.Second
	// PromoteLag is how far (in entries) a learner's log may be behind
	// its leader's for the learner to be promoted (design §8).
	PromoteLag = 1000
	// reconcileStep bounds one look, and the membership change it makes.
	reconcileStep = 30 * time.Second
)

// MembershipHost is the replica host as the reconciler drives it
// (replica.Host).
type MembershipHost interface {
	Lease(group uint64) uint64
	Members(group uint64) (voters, learners []uint64, err error)
	GroupStatus(group uint64) (replica.GroupStatus, error)
	AddLearner(ctx context.Context, group, id uint64) error
	Promote(ctx context.Context, group, id uint64) error
	RemoveReplica(ctx context.Context, group, id uint64) error
	TransferLeadership(group, to uint64) error
	Statuses() []replica.GroupStatus
	Retire(group, id uint64) error
}

// ReconcilerOptions configure a node's Reconciler.
type ReconcilerOptions struct {
	Client *clientv3.Client
	Keys   Keys
	Host   MembershipHost
	// Node is this node's ID, and Join starts its replica r of shard n,
	// added to the set, which its host does not run yet: an empty store
	// whose group joins (replica.GroupConfig.Join).
	Node string
	Join func(ctx context.Context, n int, r Replica) error
	// Grow, when set, is asked about every shard at every look: it
	// switches a shard this node owns into a group once the map asks
	// for replicas (Grower.Step).
	Grow func(ctx context.Context, m Map, n int) error
	// Leftovers deletes what the node keeps of the groups whose sets
	// name no replica on it (Leftovers.Delete); nil: nothing.
	Leftovers func(m Map) error
	// DeadAfter is how long a node stays unregistered before its
	// replicas are replaced (PROGRESSDB_CLUSTER_DEAD_AFTER); 0: never.
	DeadAfter time.Duration
	// Every is the time between looks (DefaultReconcileEvery when 0).
	Every  time.Duration
	Logger *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Reconciler moves the groups this node leads towards their sets.
type Reconciler struct {
	o    ReconcilerOptions
	life startstop.Base

	mu   sync.Mutex
	down map[string]time.Time // guarded by mu: when each node was first seen down
}

// NewReconciler returns a reconciler; Start runs it.
func NewReconciler(o ReconcilerOptions) *Reconciler {
	if o.Every <= 0 {
		o.Every = DefaultReconcileEvery
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Reconciler{o: o, down: map[string]time.Time{}}
}

// Start runs the reconciler until ctx ends or Stop.
func (r *Reconciler) Start(ctx context.Context) {
	r.life.Start(ctx, nil, func(ctx context.Context) {
		t := time.NewTicker(r.o.Every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := r.Once(ctx); err != nil && ctx.Err() == nil {
					r.o.Logger.Warn("cluster_reconcile_failed", slog.Any("err", err))
				}
			}
		}
	})
}

// Stop stops the reconciler and waits for it.
func (r *Reconciler) Stop() { r.life.Stop() }

// Once makes at most one step for every shard this node leads.
func (r *Reconciler) Once(ctx context.Context) error {
	// An etcd that does not answer delays the next look, never stops them.
	ctx, cancel := context.WithTimeout(ctx, reconcileStep)
	defer cancel()
	m, err := ReadMap(ctx, r.o.Client, r.o.Keys)
	if err != nil || !m.Replicated() {
		return err
	}
	live, err := LiveNodes(ctx, r.o.Client, r.o.Keys)
	if err != nil {
		return err
	}
	dead := r.noteDown(m, live)
	var errs []error
	for _, st := range r.o.Host.Statuses() {
		if err := r.retire(m, st); err != nil {
			errs = append(errs, err)
		}
	}
	// After the retirements: what a retired replica's folder leaves
	// beside it, or a replica dropped while the node did not run it.
	if r.o.Leftovers != nil {
		if err := r.o.Leftovers(m); err != nil {
			errs = append(errs, err)
		}
	}
	for n := range m.Sets {
		if r.o.Grow != nil {
			if err := r.o.Grow(ctx, m, n); err != nil {
				errs = append(errs, err)
			}
		}
		if err := r.join(ctx, m, n); err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", n, err))
		}
		if r.o.Host.Lease(uint64(n)) == 0 {
			continue
		}
		if err := r.step(ctx, m, n, live, dead); err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// join starts this node's replica of shard n when the set names one
// that the host does not run: added to the set while the node ran, or
// one whose start found its folder lost (Join then replaces it again if
// the first replacement failed).
func (r *Reconciler) join(ctx context.Context, m Map, n int) error {
	rp, ok := m.ReplicaOn(n, r.o.Node)
	if !ok || rp.Leaving || r.o.Join == nil {
		return nil
	}
	if _, _, err := r.o.Host.Members(uint64(n)); !errors.Is(err, replica.ErrNoGroup) {
		return nil
	}
	err := r.o.Join(ctx, n, rp)
	if errors.Is(err, ErrReplicaLost) {
		return nil // replaced: the next look starts the new one
	}
	if err != nil {
		return fmt.Errorf("join replica %d: %w", rp.ID, err)
	}
	r.o.Logger.Info("cluster_replica_joined", slog.Int("shard", n), slog.Uint64("replica", rp.ID))
	return nil
}

// retire stops a replica this node runs that its shard's set no longer
// names: its group removed it while the node was away, so it never
// applied its removal. The map names a replica before any node starts
// it, so one missing from it is gone for good.
func (r *Reconciler) retire(m Map, st replica.GroupStatus) error {
	n := int(st.Group)
	if n >= len(m.Sets) || slices.ContainsFunc(m.Sets[n], func(rp Replica) bool { return rp.ID == st.Replica }) {
		return nil
	}
	if err := r.o.Host.Retire(st.Group, st.Replica); err != nil {
		return fmt.Errorf("shard %d: retire replica %d: %w", n, st.Replica, err)
	}
	r.o.Logger.Warn("cluster_replica_retired", slog.Int("shard", n), slog.Uint64("replica", st.Replica),
		slog.String("reason", "not in the shard's set"))
	return nil
}

// noteDown records when each node of a set was first seen unregistered,
// forgets those registered again, and returns those down longer than
// DeadAfter.
func (r *Reconciler) noteDown(m Map, live []string) map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.o.Now()
	dead := map[string]bool{}
	seen := map[string]bool{}
	for _, set := range m.Sets {
		for _, rp := range set {
			if seen[rp.Node] {
				continue
			}
			seen[rp.Node] = true
			// This node runs, whatever etcd says of its registration.
			if rp.Node == r.o.Node || slices.Contains(live, rp.Node) {
				delete(r.down, rp.Node)
				continue
			}
			since, ok := r.down[rp.Node]
			if !ok {
				r.down[rp.Node] = now
				continue
			}
			if r.o.DeadAfter > 0 && now.Sub(since) >= r.o.DeadAfter {
				dead[rp.Node] = true
			}
		}
	}
	return dead
}

// step replaces a replica of a dead node, or makes the group's next
// membership change.
func (r *Reconciler) step(ctx context.Context, m Map, n int, live []string, dead map[string]bool) error {
	g := uint64(n)
	voters, learners, err := r.o.Host.Members(g)
	if err != nil {
		return err
	}
	for _, rp := range m.Desired(n) {
		if !dead[rp.Node] {
			continue
		}
		// A dead replica that cannot be replaced (no node for it) leaves
		// the group's other changes to go on.
		if changed, err := r.replaceDead(ctx, n, rp, live, voters); err != nil || changed {
			return err
		}
	}
	st, err := r.o.Host.GroupStatus(g)
	if err != nil {
		return err
	}
	next := nextStep(st.Replica, m.Sets[n], voters, learners, st.Peers)
	if next.kind == stepNone || next.kind == stepWait {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, reconcileStep)
	defer cancel()
	switch next.kind {
	case stepAddLearner:
		err = r.o.Host.AddLearner(sctx, g, next.replica)
	case stepPromote:
		err = r.o.Host.Promote(sctx, g, next.replica)
	case stepRemove:
		err = r.o.Host.RemoveReplica(sctx, g, next.replica)
	case stepTransfer:
		err = r.o.Host.TransferLeadership(g, next.replica)
	case stepDrop:
		err = DropRemoved(sctx, r.o.Client, r.o.Keys, n, next.replica)
	}
	if err != nil {
		return fmt.Errorf("%s replica %d: %w", next.kind, next.replica, err)
	}
	r.o.Logger.Info("cluster_membership_step", slog.Int("shard", n), slog.String("step", next.kind.String()),
		slog.Uint64("replica", next.replica))
	return nil
}

// replaceDead replaces shard n's replica rp, whose node is dead, by one
// on a live node holding none of the shard. When a change of the shard
// is under way and rp is the replica it added, not yet a voter (a move
// whose target died before its learner caught up), the change is
// cancelled instead: rp leaves, and the replica it was to replace, still
// a voter, stays (CancelAdded); a dead source is then replaced by the
// rule above on the next look. It reports whether the set changed.
func (r *Reconciler) replaceDead(ctx context.Context, n int, rp Replica, live []string, voters []uint64) (bool, error) {
	nm, ok, err := ReplaceReplica(ctx, r.o.Client, r.o.Keys, n, rp.Node, live)
	if err != nil {
		return false, err
	}
	if ok {
		r.o.Logger.Warn("cluster_replica_replaced", slog.Int("shard", n), slog.String("dead_node", rp.Node),
			slog.Uint64("replica", rp.ID), slog.Any("set", nm.Sets[n]))
		return true, nil
	}
	if !rp.Added || slices.Contains(voters, rp.ID) {
		return false, nil // promoted: the change ends without it, then it is replaced
	}
	nm, ok, err = CancelAdded(ctx, r.o.Client, r.o.Keys, n, rp.ID, voters)
	if err != nil || !ok {
		return false, err
	}
	r.o.Logger.Warn("cluster_replica_add_cancelled", slog.Int("shard", n), slog.String("dead_node", rp.Node),
		slog.Uint64("replica", rp.ID), slog.Any("set", nm.Sets[n]))
	return true, nil
}

// stepKind is what a group's leader does next about its membership.
type stepKind int

const (
	stepNone       stepKind = iota // the group is its set
	stepWait                       // a learner catches up
	stepAddLearner                 // a replica of the set is no member yet
	stepPromote                    // a learner of the set caught up
	stepRemove                     // a member is not in the set
	stepTransfer                   // the leader itself leaves: hand over first
	stepDrop                       // a leaving replica is no member: out of the set
)

func (k stepKind) String() string {
	return [...]string{"none", "wait", "add_learner", "promote", "remove", "transfer_leadership", "drop"}[k]
}

// memberStep is one step and the replica it concerns.
type memberStep struct {
	kind    stepKind
	replica uint64
}

// nextStep decides the next membership change of the group that leader
// self leads from its set and its applied membership, in an order that
// never lowers the number of voters of the set: learners are promoted
// (or removed, if not in the set) before anything else, replicas of the
// set are added before any other is removed, and a leaving leader hands
// the leadership to the voter of the set furthest along before it goes.
func nextStep(self uint64, set []Replica, voters, learners []uint64, peers []replica.PeerStatus) memberStep {
	desired, member := map[uint64]bool{}, map[uint64]bool{}
	for _, r := range set {
		desired[r.ID] = !r.Leaving
	}
	for _, id := range slices.Concat(voters, learners) {
		member[id] = true
	}
	progress := map[uint64]replica.PeerStatus{}
	for _, p := range peers {
		progress[p.Replica] = p
	}
	for _, id := range learners {
		if !desired[id] {
			return memberStep{stepRemove, id}
		}
		if p, ok := progress[id]; ok && p.Active && p.Match > 0 && p.Lag <= PromoteLag {
			return memberStep{stepPromote, id}
		}
		return memberStep{stepWait, id}
	}
	for _, r := range set {
		if !r.Leaving && !member[r.ID] {
			return memberStep{stepAddLearner, r.ID}
		}
	}
	for _, id := range voters {
		if desired[id] {
			continue
		}
		if id != self {
			return memberStep{stepRemove, id}
		}
		best := memberStep{kind: stepWait}
		for _, v := range voters {
			p, ok := progress[v]
			if v != self && desired[v] && ok && p.Active && (best.replica == 0 || p.Match > progress[best.replica].Match) {
				best = memberStep{stepTransfer, v}
			}
		}
		return best
	}
	for _, r := range set {
		if r.Leaving && !member[r.ID] {
			return memberStep{stepDrop, r.ID}
		}
	}
	return memberStep{kind: stepNone}
}
