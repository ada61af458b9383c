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
