package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// ErrNotOwner refuses a write to a shard this node does not own at the
// moment: not its home, or its ownership lease is lost or not yet taken.
// Writes answer 503 naming the shard; reads go on.
var ErrNotOwner = errors.New("shard not owned by this node")

// OwnerOptions configure an Owner.
type OwnerOptions struct {
	Client *clientv3.Client
	Keys   Keys
	Node   string        // this node's ID
	URL    string        // where the other nodes reach it (PROGRESSDB_ADVERTISE_URL)
	Owner  string        // unique per process (lease owner)
	TTL    time.Duration // ownership lease
	Logger *slog.Logger  // slog.Default() when nil
	// OnEtcdError, when set, sees every etcd call of the ownerships and the
	// registration that failed: renewals, acquisitions, reads of the map
	// (progressdb_cluster_etcd_errors_total).
	OnEtcdError func(error)
	// Registration, when set, is the node's registration taken already
	// (Register), which the Owner keeps from then on.
	Registration *Registration
	// OnRegistered, when set, is called each time the node registers
	// again after losing its registration (a partition longer than the
	// TTL, or a new etcd).
	OnRegistered func(ctx context.Context)
}

// Owner keeps this node's ownership of the shards whose data it holds: one
// etcd lease per shard (EtcdCoordinator), renewed by its heartbeat and
// taken again after a loss for as long as the shard map names this node.
// Each acquisition brings a larger epoch, the fencing token that every
// write to the shard carries (Fence).
type Owner struct {
	o      OwnerOptions
	ctx    context.Context // ends at Close
	stop   context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	leases map[int]retention.HeldLease // held now; absent while lost
	keeps  map[int]keeper              // the shards kept, until dropped
	moving map[int]bool                // shards being moved away: no writes
	wake   chan struct{}               // closed and replaced on every change, for Wait
}

// keeper stops the keeping of one shard.
type keeper struct {
	cancel context.CancelFunc
	done   <-chan struct{}
}

// ErrMoving refuses a write to a shard being moved away (spec §11): it
// answers 503 with Retry-After until the move ends, here or on the target.
var ErrMoving = errors.New("shard being moved")

// ErrNodeIDInUse refuses to start a node whose ID a live process has
// registered: two processes with one PROGRESSDB_NODE_ID would both take
// the node's shards.
var ErrNodeIDInUse = errors.New("node id registered by a running process")

// Registration is the node's registration (nodes/<id>), held under its
// own lease while the process runs.
type Registration struct {
	reg    EtcdCoordinator
	lease  retention.HeldLease
	stopHB context.CancelFunc
	hbDone chan struct{}
}

func newRegistration(reg EtcdCoordinator, l retention.HeldLease) *Registration {
	ctx, stop := context.WithCancel(context.Background())
	r := &Registration{reg: reg, lease: l, stopHB: stop, hbDone: make(chan struct{})}
	// Renewed from now on: a node may wait long for the cluster's
	// creation before the Owner keeps it.
	go func() {
		defer close(r.hbDone)
		l.Heartbeat(ctx)
	}()
	return r
}

// handOver stops the registration's own heartbeat, for the Owner's.
func (r *Registration) handOver() retention.HeldLease {
	r.stopHB()
	<-r.hbDone
	return r.lease
}

// Release gives the registration up (a start that fails after Register).
func (r *Registration) Release() error { return r.handOver().Release() }

// Register registers this node. A registration still held by the node's
// previous process, which died within a lease TTL (a supervisor restarts
// it at once), is waited out: etcd expires it within a TTL of the crash.
// One still held after twice the TTL is a live process's, renewing it:
// ErrNodeIDInUse.
func Register(ctx context.Context, o OwnerOptions) (*Registration, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	reg := EtcdCoordinator{Client: o.Client, Key: o.Keys.Node(o.Node), TTL: o.TTL, Owner: o.Owner, Node: o.Node, URL: o.URL,
		OnError: o.OnEtcdError}
	wctx, cancel := context.WithTimeout(ctx, 2*o.TTL)
	defer cancel()
	logged := false
	for {
		l, err := reg.Acquire(ctx)
		var held *retention.LeaseHeldError
		if !errors.As(err, &held) {
			if err != nil {
				return nil, fmt.Errorf("register node %s: %w", o.Node, err)
			}
			if logged {
				o.Logger.Info("cluster_node_registered_after_wait", "node", o.Node)
			}
			return newRegistration(reg, l), nil
		}
		if !logged {
			o.Logger.Warn("cluster_node_waiting_for_registration", "node", o.Node, "holder", held.Holder.Owner,
				"holder_pid", held.Holder.PID, "wait_at_most", (2 * o.TTL).String())
			logged = true
		}
		if err := waitDeleted(wctx, o.Client, reg.Key); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return nil, fmt.Errorf("node %s: %w (%s, still renewed after %s)", o.Node, ErrNodeIDInUse, held.Error(), 2*o.TTL)
			}
			return nil, fmt.Errorf("register node %s: %w", o.Node, err)
		}
	}
}

// waitDeleted returns once key is absent: at once when it is, else when a
// watch sees it deleted (or expired with its lease).
func waitDeleted(ctx context.Context, c *clientv3.Client, key string) error {
	get, err := c.Get(ctx, key)
	if err != nil {
		return err
	}
	if len(get.Kvs) == 0 {
		return nil
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for resp := range c.Watch(wctx, key, clientv3.WithRev(get.Header.Revision+1)) {
		if err := resp.Err(); err != nil {
			return err
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	return ctx.Err()
}

// StartOwner registers this node (unless o.Registration holds it already),
// reads the shard map and starts keeping every shard it names this node
// for. Close stops and releases them.
func StartOwner(ctx context.Context, o OwnerOptions) (*Owner, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	r := o.Registration
	if r == nil {
		var err error
		if r, err = Register(ctx, o); err != nil {
			return nil, err
		}
	}
	m, err := ReadMap(ctx, o.Client, o.Keys)
	if err != nil {
		_ = r.Release()
		return nil, err
	}
	l := r.handOver()
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	w := &Owner{o: o, ctx: runCtx, stop: stop, leases: make(map[int]retention.HeldLease),
		keeps: make(map[int]keeper), moving: make(map[int]bool), wake: make(chan struct{})}
	w.wg.Add(1)
	go w.register(runCtx, r.reg, l)
	for _, n := range m.OwnedBy(o.Node) {
		w.startKeep(n, nil)
	}
	return w, nil
}

// startKeep keeps shard n from now on, first with l when it is held
// already (taken in a move's hand-over).
func (w *Owner) startKeep(n int, l retention.HeldLease) {
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan struct{})
	w.mu.Lock()
	w.keeps[n] = keeper{cancel: cancel, done: done}
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer close(done)
		if l != nil {
			w.hold(ctx, n, l)
		}
		w.keep(ctx, n)
	}()
}

// failed reports a failed etcd call, unless the Owner is closing.
func (w *Owner) failed(err error) {
	if w.o.OnEtcdError != nil && !errors.Is(err, context.Canceled) {
		w.o.OnEtcdError(err)
	}
}

func (w *Owner) coordinator(n int) EtcdCoordinator {
	return EtcdCoordinator{Client: w.o.Client, Key: w.o.Keys.ShardOwner(n), TTL: w.o.TTL, Owner: w.o.Owner,
		Node: w.o.Node, URL: w.o.URL, OnError: w.o.OnEtcdError}
}

// register keeps the node's registration alive, taking it again after a
// loss (a partition longer than the TTL), until Close.
func (w *Owner) register(ctx context.Context, reg EtcdCoordinator, l retention.HeldLease) {
	defer w.wg.Done()
	retry := max(w.o.TTL/3, 100*time.Millisecond)
	for {
		hbCtx, stopHB := context.WithCancel(ctx)
		go l.Heartbeat(hbCtx)
		select {
		case <-l.Done():
			w.o.Logger.Warn("cluster_node_registration_lost", "node", w.o.Node, "err", l.Check())
		case <-ctx.Done():
		}
		stopHB()
		_ = l.Release()
		for {
			if ctx.Err() != nil {
				return
			}
			next, err := reg.Acquire(ctx)
			if err == nil {
				l = next
				if w.o.OnRegistered != nil {
					w.o.OnRegistered(ctx)
				}
				break
			}
			if !errors.Is(err, retention.ErrLeaseHeld) {
				w.failed(err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
		}
	}
}

// keep holds shard n: acquire, heartbeat until lost, acquire again (a
// larger epoch) once etcd lets it, until Close or the map names another
// node for it.
func (w *Owner) keep(ctx context.Context, n int) {
	defer w.wg.Done()
	retry := max(w.o.TTL/3, 100*time.Millisecond)
	for ctx.Err() == nil {
		m, err := ReadMap(ctx, w.o.Client, w.o.Keys)
		switch {
		case err != nil:
			w.failed(err)
			w.o.Logger.Warn("cluster_shard_map_unreadable", "shard", n, "err", err)
		case n >= m.Shards || m.Homes[n] != w.o.Node:
			w.o.Logger.Info("cluster_shard_not_home", "shard", n)
			return
		case m.Grouped(n):
			// Its group's leader serves it now: never owned again.
			w.o.Logger.Info("cluster_shard_grouped", "shard", n)
			return
		default:
			l, err := w.coordinator(n).Acquire(ctx)
			if err == nil {
				w.hold(ctx, n, l)
				continue
			}
			if !errors.Is(err, retention.ErrLeaseHeld) {
				w.failed(err)
				w.o.Logger.Warn("cluster_shard_acquire_failed", "shard", n, "err", err)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// hold keeps a held lease alive until it is lost or the Owner closes.
func (w *Owner) hold(ctx context.Context, n int, l retention.HeldLease) {
	w.set(n, l)
	w.o.Logger.Info("cluster_shard_owned", "shard", n, "epoch", l.Info().Epoch)
	hbCtx, stopHB := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Heartbeat(hbCtx)
	}()
	select {
	case <-l.Done():
		w.o.Logger.Warn("cluster_shard_ownership_lost", "shard", n, "epoch", l.Info().Epoch, "err", l.Check())
	case <-ctx.Done():
	}
	w.set(n, nil)
	stopHB()
	<-done
	if err := l.Release(); err != nil {
		w.o.Logger.Warn("cluster_shard_release_failed", "shard", n, "err", err)
	}
}

func (w *Owner) set(n int, l retention.HeldLease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l == nil {
		delete(w.leases, n)
	} else {
		w.leases[n] = l
	}
	close(w.wake)
	w.wake = make(chan struct{})
}

// Epoch returns shard n's current epoch while this node safely owns it,
// ErrNotOwner otherwise.
func (w *Owner) Epoch(n int) (int64, error) {
	w.mu.Lock()
	l := w.leases[n]
	moving := w.moving[n]
	w.mu.Unlock()
	if moving {
		return 0, fmt.Errorf("shard %d: %w: %w", n, ErrNotOwner, ErrMoving)
	}
	if l == nil {
		return 0, fmt.Errorf("shard %d: %w", n, ErrNotOwner)
	}
	if err := l.Check(); err != nil {
		return 0, fmt.Errorf("shard %d: %w: %w", n, ErrNotOwner, err)
	}
	return l.Info().Epoch, nil
}

// Fence returns ctx carrying shard n's epoch for the shard's store, which
// refuses the write if a newer owner has written since (store.ErrFenced);
// ErrNotOwner when this node does not own shard n now.
func (w *Owner) Fence(ctx context.Context, n int) (context.Context, error) {
	e, err := w.Epoch(n)
	if err != nil {
		return ctx, err
	}
	return store.WithEpoch(ctx, e), nil
}

// Owned lists the shards this node owns now.
func (w *Owner) Owned() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for n := range w.leases {
		out = append(out, n)
	}
	return out
}

// WaitOwned waits until shard n is owned with an epoch above after (0: any),
// and returns that epoch.
func (w *Owner) WaitOwned(ctx context.Context, n int, after int64) (int64, error) {
	for {
		w.mu.Lock()
		wake := w.wake
		w.mu.Unlock()
		if e, err := w.Epoch(n); err == nil && e > after {
			return e, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("shard %d: %w", n, ctx.Err())
		case <-wake:
		}
	}
}

// Changed is closed at the next change of this node's ownerships: a
// shard taken, lost, frozen or thawed.
func (w *Owner) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.wake
}

// Freeze stops this node's writes to shard n while it is moved away:
// Epoch and Fence answer ErrMoving (wrapping ErrNotOwner) until Thaw; the
// ownership is kept, so retention can still be held and the copy taken.
func (w *Owner) Freeze(n int) { w.setMoving(n, true) }

// Thaw ends Freeze.
func (w *Owner) Thaw(n int) { w.setMoving(n, false) }

func (w *Owner) setMoving(n int, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if on {
		w.moving[n] = true
	} else {
		delete(w.moving, n)
	}
	close(w.wake)
	w.wake = make(chan struct{})
}

// Moving reports whether shard n is frozen for a move.
func (w *Owner) Moving(n int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.moving[n]
}

// Drop stops keeping shard n and releases its ownership (the key goes at
// once, so a move's hand-over need not wait out the TTL); it returns when
// both are done. Keep takes it up again.
func (w *Owner) Drop(n int) {
	w.mu.Lock()
	k, ok := w.keeps[n]
	delete(w.keeps, n)
	w.mu.Unlock()
	if ok {
		k.cancel()
		<-k.done
	}
}

// Keep keeps shard n again after Drop: taken anew, with a larger epoch,
// for as long as the shard map names this node its home.
func (w *Owner) Keep(n int) {
	w.mu.Lock()
	_, ok := w.keeps[n]
	w.mu.Unlock()
	if !ok {
		w.startKeep(n, nil)
	}
}

// Take acquires shard n's ownership in the transaction that also checks
// cmps and applies ops (a move's hand-over, which changes the shard map
// in the same commit), and keeps it from then on. It returns the epoch.
func (w *Owner) Take(ctx context.Context, n int, cmps []clientv3.Cmp, ops []clientv3.Op) (int64, error) {
	l, err := w.coordinator(n).acquire(ctx, cmps, ops)
	if err != nil {
		return 0, err
	}
	w.Drop(n)
	w.startKeep(n, l)
	return l.Info().Epoch, nil
}

// Close stops keeping the shards and releases their leases, so another
// node can take them at once after a move.
func (w *Owner) Close() {
	w.stop()
	w.wg.Wait()
}

// Coordinator is shard n's run lease for its retention runner (spec §11:
// no file lease in cluster mode): the shard's ownership itself. A run
// starts only while this node owns the shard, stops when the ownership is
// lost, and writes under the ownership's epoch; releasing the run's lease
// leaves the ownership alone.
func (w *Owner) Coordinator(n int) retention.Coordinator { return shardRuns{w: w, n: n} }

type shardRuns struct {
	w *Owner
	n int
}

func (s shardRuns) Acquire(ctx context.Context) (retention.HeldLease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.w.mu.Lock()
	own := s.w.leases[s.n]
	s.w.mu.Unlock()
	if own == nil || own.Check() != nil {
		// Owned by another node, or by none until this one takes it again.
		return nil, &retention.LeaseHeldError{}
	}
	l := &runLease{own: own, released: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		select {
		case <-own.Done():
		case <-l.released:
		}
	}()
	return l, nil
}

// runLease is a run's view of a shard's ownership; the Owner renews it.
type runLease struct {
	own      retention.HeldLease
	once     sync.Once
	released chan struct{}
	done     chan struct{} // closed when the ownership is lost or the run releases
}

func (l *runLease) Info() retention.LeaseInfo { return l.own.Info() }
func (l *runLease) Done() <-chan struct{}     { return l.done }

func (l *runLease) Check() error {
	select {
	case <-l.released:
		return fmt.Errorf("%w: released", retention.ErrLeaseLost)
	default:
	}
	return l.own.Check()
}

// Renew only checks: the Owner's heartbeat renews the ownership.
func (l *runLease) Renew(context.Context) error { return l.Check() }

// Heartbeat waits: the Owner's heartbeat renews the ownership.
func (l *runLease) Heartbeat(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-l.done:
	}
}

// Release ends the run's view; the ownership stays.
func (l *runLease) Release() error {
	l.once.Do(func() { close(l.released) })
	return nil
}

var _ retention.HeldLease = (*runLease)(nil)
