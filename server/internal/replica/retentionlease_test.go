package replica_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/replica/replicatest"
	"github.com/progressdb/progressdb/server/internal/retention"
)

// isDone reports whether ch is closed.
func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// The retention lease of a replicated shard is its leadership: only the
// serving leader acquires it, with its term as the epoch; a release
// leaves the leadership alone. Cut off, the leader loses it (Check fails
// and Done closes once it steps down), and the next leader acquires it
// with a larger epoch while the old one cannot.
func TestRetentionLeaseFollowsLeadership(t *testing.T) {
	c := newStoreCluster(t, 17)
	const g = 17
	ctx := context.Background()
	l := c.servingLeader(g)
	for i, nd := range c.nodes {
		if i == l {
			continue
		}
		if _, err := nd.host.RetentionCoordinator(g, "follower").Acquire(ctx); !errors.Is(err, retention.ErrLeaseHeld) {
			t.Fatalf("follower %d acquired the retention lease: %v", i, err)
		}
	}
	first, err := c.nodes[l].host.RetentionCoordinator(g, "node-l").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := must(c.nodes[l].host.GroupStatus(g))
	if info := first.Info(); info.Epoch != int64(st.Term) || info.Owner != "node-l" || info.PID == 0 {
		t.Fatalf("the lease's info %+v, the group's term %d", info, st.Term)
	}
	if err := first.Check(); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if err := first.Check(); !errors.Is(err, retention.ErrLeaseLost) || !isDone(first.Done()) {
		t.Fatalf("a released lease: Check %v, done %v", err, isDone(first.Done()))
	}
	if err := first.Release(); err != nil {
		t.Fatalf("a second release: %v", err)
	}

	held, err := c.nodes[l].host.RetentionCoordinator(g, "node-l").Acquire(ctx)
	if err != nil {
		t.Fatalf("acquired again after a release: %v", err)
	}
	defer held.Release()
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		held.Heartbeat(ctx)
	}()
	c.net.Cut(replicatest.ID(g, l))
	select {
	case <-held.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the cut-off leader's lease never ended")
	}
	<-hbDone
	if err := held.Check(); !errors.Is(err, retention.ErrLeaseLost) {
		t.Fatalf("the cut-off leader's lease: Check %v", err)
	}
	if _, err := c.nodes[l].host.RetentionCoordinator(g, "node-l").Acquire(ctx); !errors.Is(err, retention.ErrLeaseHeld) {
		t.Fatalf("the cut-off replica acquired the lease: %v", err)
	}
	next := c.servingLeader(g, l)
	nl, err := c.nodes[next].host.RetentionCoordinator(g, "node-next").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Release()
	if nl.Info().Epoch <= held.Info().Epoch {
		t.Fatalf("the new leader's epoch %d is not after %d", nl.Info().Epoch, held.Info().Epoch)
	}
	c.net.Heal(replicatest.ID(g, l))
	if err := held.Check(); !errors.Is(err, retention.ErrLeaseLost) {
		t.Fatalf("the old leader's lease after the cut healed: %v", err)
	}
	if err := nl.Check(); err != nil {
		t.Fatalf("the new leader's lease: %v", err)
	}
}
