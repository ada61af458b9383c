package replica_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/replica/replicatest"
)

// leads keeps the last leadership each node was told of, and whether
// a node was ever told of an older term after a newer one.
type leads struct {
	mu       sync.Mutex
	last     map[int]replica.Leadership
	backward string
}

func (l *leads) see(node int, got replica.Leadership) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if prev, ok := l.last[node]; ok && got.Term < prev.Term && l.backward == "" {
		l.backward = fmt.Sprintf("node %d told term %d after %d", node, got.Term, prev.Term)
	}
	l.last[node] = got
}

func (l *leads) of(node int) replica.Leadership {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last[node]
}

// Every replica is told who leads and in which term, the leader that it
// leads; when the leader's node stops, the two others are told of the
// new leader in a later term. Terms told never go back.
func TestLeadershipIsToldToEveryReplica(t *testing.T) {
	const g = 7
	l := &leads{last: make(map[int]replica.Leadership)}
	c := newObservedCluster(t, l.see, g)
	agreed := func(nodes []int, leader int) func() bool {
		return func() bool {
			st, err := c.nodes[leader].host.Status(g)
			if err != nil {
				t.Fatal(err)
			}
			for _, i := range nodes {
				got := l.of(i)
				if got.Group != g || got.Replica != replicatest.ID(g, i) || got.Term != st.GetTerm() || got.Leader != replicatest.ID(g, leader) ||
					got.Leading() != (i == leader) {
					return false
				}
			}
			return true
		}
	}
	old := c.Leader(g)
	c.WaitFor("every replica told of the leader", agreed([]int{0, 1, 2}, old))
	term := l.of(old).Term
	c.stop(old)
	next := c.Leader(g)
	var live []int
	for i := range c.nodes {
		if i != old {
			live = append(live, i)
		}
	}
	c.WaitFor("the live replicas told of the new leader", agreed(live, next))
	if got := l.of(next).Term; got <= term {
		t.Fatalf("the new leader's term %d is not after the old one's %d", got, term)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.backward != "" {
		t.Fatal(l.backward)
	}
}

// leases keeps the lease changes each node was told of, in order.
type leases struct {
	mu   sync.Mutex
	told map[int][]replica.LeaseChange
}

func (l *leases) see(node int, got replica.LeaseChange) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.told[node] = append(l.told[node], got)
}

// last is the last change node was told of (zero: none).
func (l *leases) last(node int) replica.LeaseChange {
	l.mu.Lock()
	defer l.mu.Unlock()
	if told := l.told[node]; len(told) > 0 {
		return told[len(told)-1]
	}
	return replica.LeaseChange{}
}

// The host tells a lease's start once its replica may write in its term
// (the term its Lease reports), and its end: a leader cut off is told
// its lease ended once it stepped down, the next leader is told its own
// in a later term, and a host that stops ends the lease of its replicas.
// A node is never told the same change twice in a row, nor an older
// term after a newer one.
func TestLeaseStartsAndEndsAreTold(t *testing.T) {
	const g = 19
	l := &leases{told: make(map[int][]replica.LeaseChange)}
	c := &testCluster{net: replica.NewLocal(), dir: t.TempDir(), groups: []uint64{g}, nodes: make([]*node, 3),
		onLease: l.see}
	c.run(t, nil)
	first := c.servingLeader(g)
	term := c.nodes[first].host.Lease(g)
	// Told just after the lease is set.
	c.WaitFor("the serving leader told its lease", func() bool {
		return l.last(first) == replica.LeaseChange{Group: g, Replica: replicatest.ID(g, first), Term: term}
	})
	c.net.Cut(replicatest.ID(g, first))
	c.WaitFor("the cut-off leader told its lease ended", func() bool { return !l.last(first).Leading() })
	next := c.servingLeader(g, first)
	c.WaitFor("the next leader told its lease", func() bool { return l.last(next).Term == c.nodes[next].host.Lease(g) })
	if got := l.last(next).Term; got <= term {
		t.Fatalf("the next leader's lease term %d is not after %d", got, term)
	}
	c.stop(next)
	if got := l.last(next); got.Leading() {
		t.Fatalf("a stopped host's replica still told leading: %+v", got)
	}
	c.net.Heal(replicatest.ID(g, first))
	l.mu.Lock()
	defer l.mu.Unlock()
	for node, told := range l.told {
		var newest uint64
		for i, ch := range told {
			if ch.Group != g || ch.Replica != replicatest.ID(g, node) || (i > 0 && ch == told[i-1]) || (ch.Leading() && ch.Term <= newest) {
				t.Fatalf("node %d was told %+v", node, told)
			}
			newest = max(newest, ch.Term)
		}
	}
}
