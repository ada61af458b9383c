package retention

import (
	"context"
	"errors"
	"fmt"
)

// Coordinator hands out the run lease (spec §4): at most one run at a time
// over everything that shares it. FileCoordinator is the default; a
// cluster gives each shard one of its own.
type Coordinator interface {
	// Acquire takes the lease or fails at once, never queueing: a lease
	// held elsewhere answers a *LeaseHeldError (wrapping ErrLeaseHeld).
	Acquire(ctx context.Context) (HeldLease, error)
}

// HeldLease is a lease this process holds. Every method is safe to call
// from any goroutine while Heartbeat runs.
//
// The holder may act only while Check returns nil. Check turns to
// ErrLeaseLost at the renew deadline, a margin before anybody else could
// take the lease over, so a holder that cannot renew stops in time; Done
// tells a holder that does not poll. Since a paused process can still act
// late, storage that must not take a deposed holder's writes compares
// Info().Epoch, the fencing token, with the newest it has seen.
type HeldLease interface {
	// Info describes the holder; its Epoch is the fencing token, which
	// grows with every acquisition, whoever the owner.
	Info() LeaseInfo
	// Check returns nil while the lease is safely held: ours, and its
	// renew deadline not passed. It wraps ErrLeaseLost after.
	Check() error
	// Renew extends the lease after checking it is still ours. An error
	// wrapping ErrLeaseLost is final; any other (a backend that did not
	// answer) may be retried until the renew deadline.
	Renew(ctx context.Context) error
	// Heartbeat renews the lease every TTL/3 until ctx ends, the lease is
	// released or it is lost.
	Heartbeat(ctx context.Context)
	// Done is closed once the lease is lost or released: the lost signal.
	Done() <-chan struct{}
	// Release gives the lease up; calling it again does nothing.
	Release() error
}

// FileCoordinator is the file lease at Config.Path (lease.go).
type FileCoordinator struct{ Config LeaseConfig }

// Acquire takes the file lease.
func (c FileCoordinator) Acquire(ctx context.Context) (HeldLease, error) {
	l, err := AcquireLease(ctx, c.Config)
	if err != nil {
		return nil, err // a nil *Lease must not pose as a HeldLease
	}
	return l, nil
}

var (
	_ Coordinator = FileCoordinator{}
	_ HeldLease   = (*Lease)(nil)
)

// leaseSession keeps a run's lease alive, like etcd's concurrency.Session:
// it renews the lease until Close, and check says whether the run may
// still write.
type leaseSession struct {
	lease HeldLease
	stop  context.CancelFunc // ends the heartbeat
	done  chan struct{}      // closed when the heartbeat has returned
}

// openSession acquires a lease from c and starts its heartbeat. The
// heartbeat outlives ctx: after a shutdown the run still writes its footer
// under a valid lease; Close ends it.
func openSession(ctx context.Context, c Coordinator) (*leaseSession, error) {
	l, err := c.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	hbCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s := &leaseSession{lease: l, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		l.Heartbeat(hbCtx)
	}()
	return s, nil
}

// info describes the lease: owner and epoch (the fencing token).
func (s *leaseSession) info() LeaseInfo { return s.lease.Info() }

// check returns nil while the lease is safely ours; any failure wraps
// ErrLeaseLost, so a run stops rather than deletes on a doubtful lease.
func (s *leaseSession) check() error {
	err := s.lease.Check()
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		err = fmt.Errorf("%w: %w", ErrLeaseLost, err)
	}
	return err
}

// Close ends the heartbeat and releases the lease.
func (s *leaseSession) Close() error {
	s.stop()
	<-s.done
	return s.lease.Release()
}

// ReplicaEraser is a HeldLease of a replicated shard's leadership
// (docs/replication-design.md §11), whose replicas each erase what the
// run purged in their own files: the run's footer records which did.
type ReplicaEraser interface {
	// ReplicasErased waits, bounded, for the replicas the leader hears
	// from to report the erase of the last purge it applied, and returns
	// the replica IDs that reported it and those that still owe it (both
	// empty when nothing is known).
	ReplicasErased(ctx context.Context) (erased, pending []uint64, err error)
}
