package cluster

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/retention/leasetest"
	"github.com/progressdb/progressdb/server/internal/testtools/testclock"
)

// TestEtcdLeaseContract runs the lease contract on the etcd lease against
// a real etcd embedded in the test, one per case (Partition cuts it off).
func TestEtcdLeaseContract(t *testing.T) {
	t.Parallel() // waits out real lease TTLs, on an etcd of its own
	leasetest.Run(t, func(t *testing.T) leasetest.Backend {
		srv := etcdtest.Start(t)
		client := srv.Client(t)
		clk := testclock.New(time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC))
		const ttl = 10 * time.Second
		return leasetest.Backend{
			TTL: ttl,
			Coordinator: func(owner string) retention.Coordinator {
				return EtcdCoordinator{Client: client, Key: "/test/shards/3/owner", TTL: ttl,
					Owner: owner, Host: "host-" + owner, PID: 4242, Now: clk.Now}
			},
			Advance: clk.Advance,
			// A frozen holder stops renewing; etcd still holds its lease.
			Crash: func(l retention.HeldLease) { l.(*etcdLease).sess.Orphan() },
			// etcd ends a lease whose TTL ran out just as a revoke does:
			// the lease and every key attached to it are gone.
			Expire: func(l retention.HeldLease) {
				srv.Revoke(t, l.(*etcdLease).sess.Lease())
				clk.Advance(ttl)
			},
			Partition: srv.Partition,
		}
	})
}

// TestEtcdLeaseRealTime: with the real clock, the heartbeat keeps the
// lease through several TTLs, and once the holder is cut off from etcd
// the lost signal comes by itself, with nobody calling Check; another
// client takes the lease over once etcd has expired it.
func TestEtcdLeaseRealTime(t *testing.T) {
	t.Parallel() // waits out real lease TTLs, on an etcd of its own
	srv := etcdtest.Start(t)
	client := srv.Client(t)
	const ttl = 5 * time.Second // slack for a loaded machine: the deadline is 2/3 TTL after a renewal
	c := EtcdCoordinator{Client: client, Key: "/test/lease", TTL: ttl, Owner: "me"}
	l, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Heartbeat(ctx)

	first := l.Info().RenewedAt
	waitFor(t, "three renewals", func() bool { return l.Info().RenewedAt.After(first.Add(ttl)) })
	if err := l.Check(); err != nil {
		t.Fatalf("Check while heartbeating: %v", err)
	}
	other := c
	other.Owner = "other"
	if _, err := other.Acquire(context.Background()); !errors.Is(err, retention.ErrLeaseHeld) {
		t.Fatalf("second Acquire = %v, want ErrLeaseHeld", err)
	}

	// The holder's client goes through the proxy; the next one does not.
	next := EtcdCoordinator{Client: srv.DirectClient(t), Key: c.Key, TTL: ttl, Owner: "next"}
	srv.Partition()
	select {
	case <-l.Done():
	case <-time.After(time.Minute):
		t.Fatal("no lost signal a minute after the partition")
	}
	if err := l.Check(); !errors.Is(err, retention.ErrLeaseLost) {
		t.Fatalf("Check = %v, want ErrLeaseLost", err)
	}
	var nl retention.HeldLease
	waitFor(t, "take-over", func() bool {
		nl, err = next.Acquire(context.Background())
		return err == nil
	})
	defer nl.Release()
	if nl.Info().Epoch <= l.Info().Epoch {
		t.Fatalf("take-over epoch %d after %d", nl.Info().Epoch, l.Info().Epoch)
	}
}

// TestEtcdLeaseReleaseFreesKey: a released lease's key is gone at once,
// so the next holder need not wait out the TTL.
// A heartbeat started on a lease renewed last more than TTL/3 ago (a
// node's registration handed from Register's heartbeat to its Owner's,
// just before a renewal) renews it at once, not a TTL/3 later, when the
// renew deadline (2/3 TTL after the last renewal) would have passed.
func TestEtcdLeaseHeartbeatRenewsAtOnce(t *testing.T) {
	t.Parallel() // waits on etcd, of its own
	srv := etcdtest.Start(t)
	const ttl = 3 * time.Second
	var ahead atomic.Int64 // the holder's clock, ahead of the real one
	c := EtcdCoordinator{Client: srv.Client(t), Key: "/test/lease", TTL: ttl, Owner: "me",
		Now: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }}
	l, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	acquired := l.Info().RenewedAt
	// As if the last renewal were TTL/3 and a little old: the deadline is
	// TTL/3 less a little away, a renewal a whole TTL/3 away is too late.
	ahead.Store(int64(ttl/3 + 200*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Heartbeat(ctx)
	waitFor(t, "renewal", func() bool {
		select {
		case <-l.Done():
			t.Fatalf("the lease was lost: %v", l.Check())
		default:
		}
		return l.Info().RenewedAt.After(acquired.Time)
	})
}

func TestEtcdLeaseReleaseFreesKey(t *testing.T) {
	srv := etcdtest.Start(t)
	client := srv.Client(t)
	c := EtcdCoordinator{Client: client, Key: "/test/lease", TTL: time.Minute, Owner: "me"}
	l, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	resp, err := client.Get(context.Background(), c.Key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Fatalf("key still there after Release: %s", resp.Kvs[0].Value)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no %s after a minute", what)
		}
	}
}
