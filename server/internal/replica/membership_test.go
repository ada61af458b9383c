package replica_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/replica/replicatest"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// addNode starts node i beyond the first three: its replicas join the
// groups, which then add them.
func (c *testCluster) addNode(i int) {
	c.T.Helper()
	for len(c.nodes) <= i {
		c.nodes = append(c.nodes, nil)
	}
	if c.joining == nil {
		c.joining = make(map[int]bool)
	}
	c.joining[i] = true
	c.start(i)
}

// members returns group g's voters and learners as node i applied them.
func (c *testCluster) members(i int, g uint64) (voters, learners []uint64) {
	c.T.Helper()
	voters, learners, err := c.nodes[i].host.Members(g)
	if err != nil {
		c.T.Fatal(err)
	}
	return voters, learners
}

// A replica on a fourth node joins a group as a learner, catches up
// (by the snapshot an empty replica needs) and is promoted; the leader
// hands it the leadership and it removes the old leader, whose node then
// has neither the group nor its folder. Writes before, during and after
// are on every replica left, and changes that do not apply are refused.
func TestLearnerJoinsAndReplacesAReplica(t *testing.T) {
	const g = 7
	ctx := context.Background()
	c := newStoreCluster(t, g)
	l := c.servingLeader(g)
	must(c.nodes[l].store(g).CreateThread(ctx, store.Thread{ID: "t", Title: "t", Author: "ann"}))
	c.writeMessages(l, g, "t", 5)
	c.addNode(3)
	learner := replicatest.ID(g, 3)
	f := (l + 1) % 3
	leader := c.nodes[l].host
	for _, refused := range []struct {
		err  error
		want error
	}{
		{c.nodes[f].host.AddLearner(ctx, g, learner), store.ErrNotLeader},
		{leader.Promote(ctx, g, learner), replica.ErrMembership},
		{leader.AddLearner(ctx, g, replicatest.ID(g, f)), replica.ErrMembership},
	} {
		if !errors.Is(refused.err, refused.want) {
			t.Fatalf("got %v, want %v", refused.err, refused.want)
		}
	}

	if err := leader.AddLearner(ctx, g, learner); err != nil {
		t.Fatal(err)
	}
	c.writeMessages(l, g, "t", 3)
	c.sameEverywhere(g, l)
	if _, learners := c.members(l, g); !slices.Equal(learners, []uint64{learner}) {
		t.Fatalf("learners %v, want [%d]", learners, learner)
	}
	if got, want := c.databaseID(3, g), c.databaseID(l, g); got != want {
		t.Fatalf("the learner's database is %s, the leader's %s: not caught up by snapshot", got, want)
	}
	if err := leader.Promote(ctx, g, learner); err != nil {
		t.Fatal(err)
	}
	if voters, learners := c.members(l, g); len(voters) != 4 || len(learners) != 0 {
		t.Fatalf("after promotion: voters %v, learners %v", voters, learners)
	}

	// A replica takes the leadership only once it applied its own
	// promotion; raft gives a transfer up after an election timeout.
	c.WaitFor("the new voter to know it votes", func() bool {
		voters, _ := c.members(3, g)
		return slices.Contains(voters, learner)
	})
	c.WaitFor("the new voter to lead", func() bool {
		if c.nodes[3].host.Lease(g) != 0 {
			return true
		}
		if leader.Lease(g) != 0 {
			if err := leader.TransferLeadership(g, learner); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(200 * time.Millisecond)
		return false
	})
	old := replicatest.ID(g, l)
	if err := c.nodes[3].host.RemoveReplica(ctx, g, old); err != nil {
		t.Fatal(err)
	}
	c.WaitFor("the removed replica's folder to go", func() bool {
		_, err := os.Stat(c.folder(l, g))
		return c.nodes[l].host.Store(g) == nil && os.IsNotExist(err)
	})
	if _, err := c.nodes[l].host.Status(g); !errors.Is(err, replica.ErrNoGroup) {
		t.Fatalf("the removed replica's host still runs the group: %v", err)
	}
	c.writeMessages(3, g, "t", 3)
	c.sameEverywhere(g, 3)
	want := []uint64{replicatest.ID(g, (l+1)%3), replicatest.ID(g, (l+2)%3), learner}
	slices.Sort(want)
	for _, i := range []int{(l + 1) % 3, (l + 2) % 3, 3} {
		if voters, _ := c.members(i, g); !slices.Equal(voters, want) {
			t.Fatalf("node %d's voters are %v, want %v", i, voters, want)
		}
		if msgs := page(c.nodes[i].store(g).ListMessages(ctx, "t", store.ListOptions{Limit: 100})); len(msgs) != 11 {
			t.Fatalf("node %d holds %d messages, want 11", i, len(msgs))
		}
	}
}
