// Package leasetest is the contract every lease backend keeps (spec §4 and
// §11): one suite, run by the file lease's tests and by the etcd lease's
// against a real embedded etcd. A run relies on exactly what it checks:
// acquisition is exclusive and never queues, renewal moves the renew
// deadline, a holder that cannot renew finds its lease lost by that
// deadline (Check and Done), and the fencing token grows across owners.
package leasetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
)

// Backend is one lease backend, fresh for one test. All its coordinators
// share one lease and one clock, which only Advance moves.
type Backend struct {
	// TTL is the lease lifetime the coordinators were made with.
	TTL time.Duration
	// Coordinator returns a coordinator for owner, as a process of its
	// own on a host of its own would have.
	Coordinator func(owner string) retention.Coordinator
	// Advance moves the holders' clock on.
	Advance func(d time.Duration)
	// Crash stops l's holder without a release, as a killed or frozen
	// process: the lease stays taken until it expires.
	Crash func(l retention.HeldLease)
	// Expire ends a crashed holder's lease the way the backend does once
	// its TTL has run out unrenewed.
	Expire func(l retention.HeldLease)
	// Partition cuts every holder off the backend for good.
	Partition func()
}

// Run runs the contract against the backends newBackend makes.
func Run(t *testing.T, newBackend func(t *testing.T) Backend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b Backend)
	}{
		{"AcquireIsExclusive", testExclusive},
		{"RenewMovesDeadline", testRenew},
		{"ExpiryLoses", testExpiry},
		{"TakeOverAfterExpiry", testTakeOver},
		{"PartitionLoses", testPartition},
		{"TokenGrowsAcrossOwners", testTokens},
		{"ReleaseTwice", testReleaseTwice},
		{"HeartbeatEndsWithTheLease", testHeartbeatEnds},
	}
	for _, tc := range tests {
		// Each on a backend of its own: the etcd ones mostly wait on
		// their server and on real lease lifetimes.
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newBackend(t))
		})
	}
}

func acquire(t *testing.T, b Backend, owner string) retention.HeldLease {
	t.Helper()
	l, err := b.Coordinator(owner).Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire(%s): %v", owner, err)
	}
	t.Cleanup(func() { _ = l.Release() })
	if got := l.Info().Owner; got != owner {
		t.Fatalf("Info().Owner = %q, want %q", got, owner)
	}
	if l.Info().Epoch <= 0 {
		t.Fatalf("Info().Epoch = %d, want a positive fencing token", l.Info().Epoch)
	}
	return l
}

// requireHeld checks that owner is refused at once with holder named.
func requireHeld(t *testing.T, b Backend, owner string, holder retention.HeldLease) {
	t.Helper()
	l, err := b.Coordinator(owner).Acquire(context.Background())
	if err == nil {
		_ = l.Release()
		t.Fatalf("Acquire(%s) succeeded while %s holds the lease", owner, holder.Info().Owner)
	}
	var held *retention.LeaseHeldError
	if !errors.As(err, &held) || !errors.Is(err, retention.ErrLeaseHeld) {
		t.Fatalf("Acquire(%s) = %v, want a *LeaseHeldError wrapping ErrLeaseHeld", owner, err)
	}
	want := holder.Info()
	if held.Holder.Owner != want.Owner {
		t.Fatalf("held by %q, want %q", held.Holder.Owner, want.Owner)
	}
	if held.Holder.Epoch != 0 && held.Holder.Epoch != want.Epoch {
		t.Fatalf("holder epoch %d, want %d", held.Holder.Epoch, want.Epoch)
	}
}

func requireLost(t *testing.T, l retention.HeldLease) {
	t.Helper()
	if err := l.Check(); !errors.Is(err, retention.ErrLeaseLost) {
		t.Fatalf("Check = %v, want ErrLeaseLost", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed once Check reports the lease lost")
	}
	if err := l.Renew(context.Background()); !errors.Is(err, retention.ErrLeaseLost) {
		t.Fatalf("Renew of a lost lease = %v, want ErrLeaseLost", err)
	}
	if err := l.Check(); !errors.Is(err, retention.ErrLeaseLost) {
		t.Fatalf("Check after a late Renew = %v: a lost lease came back", err)
	}
}

func requireHeldByMe(t *testing.T, l retention.HeldLease) {
	t.Helper()
	if err := l.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	select {
	case <-l.Done():
		t.Fatal("Done closed while the lease is held")
	default:
	}
}

func testExclusive(t *testing.T, b Backend) {
	a := acquire(t, b, "a")
	requireHeldByMe(t, a)
	requireHeld(t, b, "b", a)
	requireHeld(t, b, "c", a)
	if err := a.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	requireLost(t, a)
	bl := acquire(t, b, "b")
	if bl.Info().Epoch <= a.Info().Epoch {
		t.Fatalf("epoch after release %d, want more than %d", bl.Info().Epoch, a.Info().Epoch)
	}
	requireHeld(t, b, "a", bl)
}

func testRenew(t *testing.T, b Backend) {
	a := acquire(t, b, "a")
	first := a.Info()
	b.Advance(b.TTL / 2)
	if err := a.Renew(context.Background()); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	// Past the first renew deadline (2/3 TTL) but within the second.
	b.Advance(b.TTL / 2)
	requireHeldByMe(t, a)
	got := a.Info()
	if got.Epoch != first.Epoch || got.Owner != first.Owner {
		t.Fatalf("renewal changed the holder: %+v, was %+v", got, first)
	}
	if !got.RenewedAt.After(first.RenewedAt.Time) || !got.Expires.After(first.Expires.Time) {
		t.Fatalf("renewal did not move renewed_at/expires: %+v, was %+v", got, first)
	}
	requireHeld(t, b, "b", a)
	// Without another renewal the second deadline passes too.
	b.Advance(b.TTL / 6)
	requireLost(t, a)
}

func testExpiry(t *testing.T, b Backend) {
	a := acquire(t, b, "a")
	// The holder stops at its renew deadline, two thirds into the TTL,
	// before anybody else could take the lease over at expiry.
	b.Advance(b.TTL*2/3 - time.Millisecond)
	requireHeldByMe(t, a)
	b.Advance(time.Millisecond)
	requireLost(t, a)
}

func testTakeOver(t *testing.T, b Backend) {
	a := acquire(t, b, "a")
	b.Crash(a)
	requireHeld(t, b, "b", a)
	b.Expire(a)
	bl := acquire(t, b, "b")
	if bl.Info().Epoch <= a.Info().Epoch {
		t.Fatalf("epoch after take-over %d, want more than %d", bl.Info().Epoch, a.Info().Epoch)
	}
	// The old holder, were it to wake up, cannot renew its way back.
	requireLost(t, a)
	requireHeldByMe(t, bl)
}

func testPartition(t *testing.T, b Backend) {
	a := acquire(t, b, "a")
	b.Partition()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Renew(ctx); err == nil {
		t.Fatal("Renew succeeded with the backend cut off")
	}
	// Some backends give up at once, others at the renew deadline: by
	// then every one has.
	b.Advance(b.TTL * 2 / 3)
	requireLost(t, a)
}

func testTokens(t *testing.T, b Backend) {
	var last int64
	next := func(l retention.HeldLease) {
		t.Helper()
		if e := l.Info().Epoch; e <= last {
			t.Fatalf("%s got epoch %d after %d", l.Info().Owner, e, last)
		}
		last = l.Info().Epoch
	}
	a := acquire(t, b, "a")
	next(a)
	mustRelease(t, a)
	a2 := acquire(t, b, "a") // the same owner again gets a new token
	next(a2)
	mustRelease(t, a2)
	bl := acquire(t, b, "b")
	next(bl)
	b.Crash(bl)
	b.Expire(bl)
	c := acquire(t, b, "c")
	next(c)
	mustRelease(t, c)
	d := acquire(t, b, "d")
	next(d)
}

func testReleaseTwice(t *testing.T, b Backend) {
	a := acquire(t, b, "a")
	mustRelease(t, a)
	mustRelease(t, a)
	requireLost(t, a)
}

func testHeartbeatEnds(t *testing.T, b Backend) {
	for _, end := range []string{"release", "cancel"} {
		l := acquire(t, b, "a-"+end)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			l.Heartbeat(ctx)
		}()
		if end == "release" {
			mustRelease(t, l)
		} else {
			cancel()
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("Heartbeat still running 30s after %s", end)
		}
		cancel()
		if end == "cancel" {
			// Stopping the heartbeat does not give the lease up.
			requireHeldByMe(t, l)
			mustRelease(t, l)
		}
	}
}

func mustRelease(t *testing.T, l retention.HeldLease) {
	t.Helper()
	if err := l.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
