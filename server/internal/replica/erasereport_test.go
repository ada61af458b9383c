package replica_test

import (
	"context"
	"slices"
	"testing"

	"github.com/progressdb/progressdb/server/internal/replica/replicatest"
	"github.com/progressdb/progressdb/server/internal/retention"
)

// replicasErased asks replica (g, l), which leads, which replicas erased
// its last purge, as a retention run does for its footer.
func (c *testCluster) replicasErased(l int, g uint64) (erased, pending []uint64) {
	c.T.Helper()
	ctx := context.Background()
	lease, err := c.nodes[l].host.RetentionCoordinator(g, "node").Acquire(ctx)
	if err != nil {
		c.T.Fatal(err)
	}
	defer lease.Release()
	erased, pending, err = lease.(retention.ReplicaEraser).ReplicasErased(ctx)
	if err != nil {
		c.T.Fatal(err)
	}
	return erased, pending
}

// The leader knows which replicas erased the last purge it applied: each
// reports it through the log once its files hold none of it. A replica
// down during a purge is pending until it returns (by snapshot: the
// leader's log dropped up to the purge) and erased; then it is listed
// with the others.
func TestLeaderKnowsWhichReplicasErased(t *testing.T) {
	c := newStoreCluster(t, 5)
	const g = 5
	l := c.servingLeader(g)
	s := c.nodes[l].store(g)
	writeMarked(t, s, "a", "EraseReportA")
	writeMarked(t, s, "b", "EraseReportB")
	c.sameEverywhere(g, l)
	all := replicatest.Peers(g)
	purge(t, s, "a")
	if erased, pending := c.replicasErased(l, g); !slices.Equal(erased, all) || len(pending) != 0 {
		t.Fatalf("after a purge with every replica up: erased %v, pending %v; want %v erased", erased, pending, all)
	}
	f := (l + 1) % 3
	c.stop(f)
	purge(t, s, "b")
	down := replicatest.ID(g, f)
	up := slices.DeleteFunc(slices.Clone(all), func(id uint64) bool { return id == down })
	if erased, pending := c.replicasErased(l, g); !slices.Equal(erased, up) || !slices.Equal(pending, []uint64{down}) {
		t.Fatalf("replica %d down during the purge: erased %v, pending %v; want %v and [%d]", down, erased, pending, up, down)
	}
	c.start(f)
	c.erasedEverywhere(g, l)
	c.WaitFor("the returned replica's report", func() bool {
		erased, pending := c.replicasErased(l, g)
		return slices.Equal(erased, all) && len(pending) == 0
	})
}
