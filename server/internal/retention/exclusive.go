package retention

import (
	"context"
	"fmt"
)

// Exclusive runs fn while this process holds the run lease and its run
// slot, as a retention run would: no run, here or in a process sharing the
// lease, goes at the same time. Maintenance of the whole database that a
// run must not interleave with (`keys rotate-kek`, `keys encrypt-existing`)
// runs through it. fn calls check between its batches and stops with its
// error once the lease is in doubt. A lease held elsewhere answers a
// *LeaseHeldError, fn not called.
func (r *Runner) Exclusive(ctx context.Context, what string, fn func(ctx context.Context, check func() error) error) error {
	return r.exclusive(ctx, what, func(ctx context.Context, lease *leaseSession) error { return fn(ctx, lease.check) })
}

// exclusive is Exclusive for the workflows of this package, which see the
// lease session itself (its holder for the test hooks, its epoch).
func (r *Runner) exclusive(ctx context.Context, what string, fn func(ctx context.Context, lease *leaseSession) error) error {
	select {
	case r.slot <- struct{}{}:
	default:
		holder := LeaseInfo{Owner: r.owner, Host: r.host, PID: r.pid}
		if li := r.active.Load(); li != nil {
			holder = *li
		}
		return &LeaseHeldError{Holder: holder}
	}
	defer func() { <-r.slot }()
	lease, err := openSession(ctx, r.coord)
	if err != nil {
		return err
	}
	info := lease.info()
	r.active.Store(&info)
	r.metrics.LeaseHeld.Set(1)
	r.log.Info("retention_exclusive_started", "what", what, "lease_owner", info.Owner, "epoch", info.Epoch)
	defer func() {
		if err := lease.Close(); err != nil {
			r.metrics.countError(stageLease)
			r.log.Warn("retention_lease_release_failed", "what", what, "err", err)
		}
		r.metrics.LeaseHeld.Set(0)
		r.active.Store(nil)
	}()
	if err := fn(ctx, lease); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Exclusive is Runner.Exclusive of the service's runner.
func (m *Manager) Exclusive(ctx context.Context, what string, fn func(ctx context.Context, check func() error) error) error {
	return m.runner.Exclusive(ctx, what, fn)
}
