package replica_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/replica/replicatest"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// peer finds replica id in st's peers.
func peer(st replica.GroupStatus, id uint64) (replica.PeerStatus, bool) {
	for _, p := range st.Peers {
		if p.Replica == id {
			return p, true
		}
	}
	return replica.PeerStatus{}, false
}

// The leader's status names every replica's progress: a follower cut
// off falls behind by the writes made meanwhile and stops being active,
// and is caught up again after the cut heals. A follower's status names
// the leader and the term and no progress.
func TestGroupStatusShowsLag(t *testing.T) {
	c := newStoreCluster(t, 15)
	const g = 15
	ctx := context.Background()
	l := c.servingLeader(g)
	s := c.nodes[l].store(g)
	th := must(s.CreateThread(ctx, store.Thread{ID: "t", Title: "t", Author: "a"}))
	c.caughtUp(g, l)
	f := (l + 1) % 3
	fid := replicatest.ID(g, f)
	c.WaitFor("every replica matched and active", func() bool {
		st := must(c.nodes[l].host.GroupStatus(g))
		for _, p := range st.Peers {
			if p.Lag != 0 || !p.Active || p.State != "replicate" {
				return false
			}
		}
		return len(st.Peers) == 3
	})
	st := must(c.nodes[l].host.GroupStatus(g))
	if st.Role != replica.RoleLeader || !st.Serving || st.Leader != replicatest.ID(g, l) || st.Replica != st.Leader ||
		st.Applied != c.raftLog(l, g).Applied() || st.Commit < st.Applied || st.Term == 0 {
		t.Fatalf("the leader's status: %+v", st)
	}
	fst := must(c.nodes[f].host.GroupStatus(g))
	if fst.Role != replica.RoleFollower || fst.Serving || fst.Leader != st.Leader || fst.Term != st.Term || len(fst.Peers) != 0 {
		t.Fatalf("a follower's status: %+v (the leader's %+v)", fst, st)
	}

	c.net.Cut(fid)
	const n = 5
	for k := range n {
		must(s.AppendMessage(ctx, th.ID, store.Message{Author: "a", Body: body(fmt.Sprint(k))}))
	}
	c.WaitFor("the cut-off follower seen behind and inactive", func() bool {
		p, ok := peer(must(c.nodes[l].host.GroupStatus(g)), fid)
		return ok && p.Lag >= n && !p.Active
	})
	c.net.Heal(fid)
	c.WaitFor("the follower caught up", func() bool {
		p, ok := peer(must(c.nodes[l].host.GroupStatus(g)), fid)
		return ok && p.Lag == 0 && p.Active
	})
	all := c.nodes[l].host.Statuses()
	if len(all) != 1 || all[0].Group != g {
		t.Fatalf("Statuses: %+v", all)
	}
	if _, err := c.nodes[l].host.GroupStatus(g + 1); !errors.Is(err, replica.ErrNoGroup) {
		t.Fatalf("the status of a group not run here: %v", err)
	}
}
