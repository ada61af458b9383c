package replica_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// newKeepingCluster is newStoreCluster with hosts that keep keep applied
// entries for slow followers.
func newKeepingCluster(t *testing.T, keep int, groups ...uint64) *testCluster {
	c := &testCluster{net: replica.NewLocal(), dir: t.TempDir(), groups: groups, nodes: make([]*node, 3), logKeep: keep}
	return c.run(t, nil)
}

// writeMarked writes a thread through s whose title and messages hold
// marker, and soft-deletes it: ready to purge.
func writeMarked(t *testing.T, s *store.Store, tid, marker string) {
	t.Helper()
	ctx := context.Background()
	must(s.CreateThread(ctx, store.Thread{ID: tid, Title: "title " + marker, Author: "ann"}))
	for k := range 3 {
		must(s.AppendMessage(ctx, tid, store.Message{Author: "ann", Body: body(fmt.Sprintf("%s %d", marker, k))}))
	}
	must(s.DeleteThread(ctx, tid))
}

// purge purges thread tid through the leader's store, as a retention
// run does (the erase owed first).
func purge(t *testing.T, s *store.Store, tid string) {
	t.Helper()
	ctx := context.Background()
	if err := s.OweErase(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PurgeThread(ctx, tid, store.PurgeOptions{}); err != nil || n == 0 {
		t.Fatalf("purge %s: %d, %v", tid, n, err)
	}
}

// erasedEverywhere waits until every running replica of g applied the
// leader's last purge (itself, or in a snapshot's state) and owes no
// erase.
func (c *testCluster) erasedEverywhere(g uint64, l int) {
	c.T.Helper()
	want, _ := c.raftLog(l, g).Purges()
	c.WaitFor(fmt.Sprintf("group %d's replicas to erase the purge at %d", g, want), func() bool {
		for i, nd := range c.nodes {
			if nd == nil {
				continue
			}
			// Applied first: a replica below the purge may be about to
			// replace its store by a snapshot's.
			if c.raftLog(i, g).Applied() < want || nd.host.ErasePending() != 0 {
				return false
			}
			if erased, err := nd.store(g).Erased(context.Background()); err != nil || !erased {
				return false
			}
		}
		return true
	})
}

// A thread purged through the leader leaves no file of any replica
// holding its content: each replica applies the purge, drops its log up
// to it (the entries that wrote the thread) and erases both; the other
// thread's content stays. A replica whose erase cannot complete yet
// counts in the metric of replicas owing one until it erased.
func TestPurgeReachesEveryReplicasFiles(t *testing.T) {
	c := newStoreCluster(t, 4)
	const g = 4
	marker, kept := "PurgedMarkerQ7x", "KeptMarkerW2v"
	l := c.servingLeader(g)
	s := c.nodes[l].store(g)
	writeMarked(t, s, "gone", marker)
	must(s.CreateThread(context.Background(), store.Thread{ID: "kept", Title: kept, Author: "bob"}))
	c.sameEverywhere(g, l)
	for i := range c.nodes {
		storetest.RequireAll(t, c.folder(i, g), marker, kept)
	}
	// A follower's erase is held up by a staging checkpoint in its
	// folder (a backup opening its files): it owes the erase, and says
	// so, until the checkpoint goes.
	f := (l + 1) % 3
	staging := must(c.nodes[f].store(g).Checkpoint(context.Background(), "held"))
	const pending = "progressdb_cluster_erase_pending_replicas"
	purge(t, s, "gone")
	c.WaitFor("the follower's erase to fail", func() bool { return c.nodes[f].host.ErasePending() == 1 })
	if v := c.metric(f, pending, g).GetGauge().GetValue(); v != 1 {
		t.Fatalf("%s = %v on the follower owing its erase", pending, v)
	}
	if err := c.nodes[f].store(g).RemoveCheckpoint(staging); err != nil {
		t.Fatal(err)
	}
	c.erasedEverywhere(g, l)
	c.sameEverywhere(g, l)
	for i := range c.nodes {
		if v := c.metric(i, pending, g).GetGauge().GetValue(); v != 0 {
			t.Errorf("%s = %v on node %d after its erase", pending, v, i)
		}
	}
	purgedAt, _ := c.raftLog(l, g).Purges()
	for i := range c.nodes {
		if first, _ := c.raftLog(i, g).FirstIndex(); first <= purgedAt {
			t.Errorf("replica %d's log starts at %d, the purge was applied at %d", i, first, purgedAt)
		}
		rep := storetest.RequireNone(t, c.folder(i, g), marker)
		storetest.RequireAll(t, c.folder(i, g), kept)
		if ok, err := c.nodes[i].store(g).Erased(context.Background()); err != nil || !ok {
			t.Errorf("replica %d: Erased = %v, %v after its erase (%v)", i, ok, err, rep)
		}
	}
}
