// Package replicatest is the harness the replica packages' tests share
// over three nodes' hosts, however their nodes and transports are built:
// a state machine that records what it applied, and waiting for a
// leader, for a proposal to be applied and for the replicas to agree.
package replicatest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/progressdb/progressdb/server/internal/replica"
)

// ID is replica (g, i)'s Raft ID, g*10+i+1: group g's replica on node i.
func ID(g uint64, i int) uint64 { return g*10 + uint64(i) + 1 }

// Peers is the Raft IDs of group g's replicas, one on each node.
func Peers(g uint64) []uint64 { return []uint64{ID(g, 0), ID(g, 1), ID(g, 2)} }

// Recorder is a state machine that keeps what it applied, in order. It
// outlives a node's restart, as a shard's database does. An index at or
// below the last one applied is an error (a replica never applies an
// entry twice or out of order) unless SkipRepeats: a recorder saves no
// applied index of its own, so a stop between an apply and the group's
// save of the applied index repeats it (replica.StateMachine).
type Recorder struct {
	SkipRepeats bool

	mu   sync.Mutex
	last uint64
	cmds []string
}

// Apply records cmd at index.
func (r *Recorder) Apply(_ context.Context, index, _ uint64, cmd []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if index <= r.last {
		if r.SkipRepeats {
			return nil
		}
		return fmt.Errorf("entry %d applied after %d", index, r.last)
	}
	r.last = index
	r.cmds = append(r.cmds, string(cmd))
	return nil
}

// Applied returns the commands applied so far, in order.
func (r *Recorder) Applied() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.cmds)
}

// Nodes is the harness over three nodes: Host gives node i's host, nil
// while it is stopped, and SM the recorders by replica ID.
type Nodes struct {
	T    *testing.T
	Host func(i int) *replica.Host
	SM   map[uint64]*Recorder
}

// N is the number of nodes.
const N = 3

// WaitFor polls cond until it holds; the deadline only keeps a broken
// test from hanging.
func (c *Nodes) WaitFor(what string, cond func() bool) {
	c.T.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			c.T.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Leader waits for a node, other than the excluded ones, that leads
// group g and returns its index.
func (c *Nodes) Leader(g uint64, not ...int) int {
	c.T.Helper()
	at := -1
	c.WaitFor(fmt.Sprintf("a leader of group %d", g), func() bool {
		for i := range N {
			h := c.Host(i)
			if h == nil || slices.Contains(not, i) {
				continue
			}
			if st, err := h.Status(g); err != nil {
				c.T.Fatal(err)
			} else if st.RaftState == raft.StateLeader {
				at = i
				return true
			}
		}
		return false
	})
	return at
}

// Propose proposes cmd through node i until it is applied there. A
// proposal dropped for want of a leader is proposed again: it never
// entered the log.
func (c *Nodes) Propose(i int, g uint64, cmd string) {
	c.T.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := c.Host(i).Propose(ctx, g, []byte(cmd))
		cancel()
		if errors.Is(err, raft.ErrProposalDropped) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			c.T.Fatalf("propose %q through node %d: %v", cmd, i, err)
		}
		return
	}
}

// ProposeFromEvery proposes per commands, cmd(g, i, k), through every
// node i of each group g, all at once, each node's in order of k, and
// returns once each is applied where it was proposed.
func (c *Nodes) ProposeFromEvery(groups []uint64, per int, cmd func(g uint64, i, k int) string) {
	var wg sync.WaitGroup
	for _, g := range groups {
		for i := range N {
			wg.Go(func() {
				for k := range per {
					c.Propose(i, g, cmd(g, i, k))
				}
			})
		}
	}
	wg.Wait()
}

// CutOffLeader runs one scenario over any transport: group g's leader,
// cut off from both peers by cut(node, true), commits nothing (a command
// proposed to it is never applied by any replica) while the majority
// elects a leader and commits; after cut(node, false) every replica
// applies the same two commands. It returns the old leader's node.
func (c *Nodes) CutOffLeader(g uint64, cut func(node int, on bool)) int {
	c.T.Helper()
	c.Propose(0, g, "before")
	c.Converged(g, 1)
	old := c.Leader(g)
	cut(old, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := c.Host(old).Propose(ctx, g, []byte("minority"))
	cancel()
	if err == nil {
		c.T.Fatal("a leader cut off from its peers applied a command")
	}
	next := c.Leader(g, old)
	c.Propose(next, g, "majority")
	cut(old, false)
	if got := c.Converged(g, 2); !slices.Equal(got, []string{"before", "majority"}) {
		c.T.Fatalf("applied %q (proposal through the cut-off leader: %v)", got, err)
	}
	return old
}

// Converged waits until every replica of g applied n commands and checks
// that they applied the same ones in the same order.
func (c *Nodes) Converged(g uint64, n int) []string {
	c.T.Helper()
	c.WaitFor(fmt.Sprintf("group %d's replicas to apply %d commands", g, n), func() bool {
		for i := range N {
			if h := c.Host(i); h != nil {
				if _, err := h.Status(g); err != nil { // stopped on an error: it will never apply
					c.T.Fatal(err)
				}
			}
			if len(c.SM[ID(g, i)].Applied()) < n {
				return false
			}
		}
		return true
	})
	want := c.SM[ID(g, 0)].Applied()
	for i := 1; i < N; i++ {
		if got := c.SM[ID(g, i)].Applied(); !slices.Equal(got, want) {
			c.T.Fatalf("group %d: replica %d applied %q, replica 0 %q", g, i, got, want)
		}
	}
	if len(want) != n {
		c.T.Fatalf("group %d applied %d commands, %d were proposed: %q", g, len(want), n, want)
	}
	return want
}
