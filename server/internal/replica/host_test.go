package replica_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// recorder is a state machine that keeps what it applied. It outlives a
// host's restart, as a shard's database does, and refuses an index at or
// below one it applied: a replica never applies an entry twice or out
// of order.
type recorder struct {
	mu   sync.Mutex
	last uint64
	cmds []string
}

func (r *recorder) Apply(_ context.Context, index, _ uint64, cmd []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if index <= r.last {
		return fmt.Errorf("entry %d applied after %d", index, r.last)
	}
	r.last = index
	r.cmds = append(r.cmds, string(cmd))
	return nil
}

func (r *recorder) applied() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.cmds)
}

// node is one process's host with a replica of each group.
type node struct {
	host   *replica.Host
	stores map[uint64]*store.Store
}

// testCluster runs three nodes over one Local network; replica (g, i) has
// the Raft ID g*10+i+1.
type testCluster struct {
	t      *testing.T
	net    *replica.Local
	dir    string
	groups []uint64
	nodes  []*node
	sm     map[uint64]*recorder                 // by replica ID
	onLead func(node int, l replica.Leadership) // nil: none
}

func rid(g uint64, i int) uint64 { return g*10 + uint64(i) + 1 }

func newTestCluster(t *testing.T, groups ...uint64) *testCluster {
	return newCluster(t, make(map[uint64]*recorder), nil, groups...)
}

// newObservedCluster is newTestCluster with onLead seeing every
// leadership from the start.
func newObservedCluster(t *testing.T, onLead func(node int, l replica.Leadership), groups ...uint64) *testCluster {
	return newCluster(t, make(map[uint64]*recorder), onLead, groups...)
}

// newCluster runs the three nodes; sm nil: each group applies its
// store's commands, and the stores' writes are proposals.
func newCluster(t *testing.T, sm map[uint64]*recorder, onLead func(node int, l replica.Leadership), groups ...uint64) *testCluster {
	c := &testCluster{t: t, net: replica.NewLocal(), dir: t.TempDir(), groups: groups,
		nodes: make([]*node, 3), sm: sm, onLead: onLead}
	for i := range c.nodes {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.stop(i)
		}
	})
	return c
}

// start opens node i's stores and runs its host, with a fresh log for
// each group the first time and the log on disk after that.
func (c *testCluster) start(i int) {
	c.t.Helper()
	ctx := context.Background()
	ticks := 30
	if c.sm == nil {
		// A store's writer fails when its leader loses the lease: a longer
		// timeout keeps a loaded machine's pauses from deposing leaders.
		ticks = 50
	}
	cfg := replica.Config{Transport: c.net, Tick: 10 * time.Millisecond, ElectionTicks: ticks,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if c.onLead != nil {
		cfg.OnLeadership = func(l replica.Leadership) { c.onLead(i, l) }
	}
	h, err := replica.NewHost(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	nd := &node{host: h, stores: make(map[uint64]*store.Store)}
	for _, g := range c.groups {
		s, err := store.Open(filepath.Join(c.dir, fmt.Sprintf("node%d", i), fmt.Sprintf("shard%d", g)), store.Options{})
		if err != nil {
			c.t.Fatal(err)
		}
		nd.stores[g] = s
		id := rid(g, i)
		gc := replica.GroupConfig{Group: g, Replica: id, Peers: []uint64{rid(g, 0), rid(g, 1), rid(g, 2)}, Store: s}
		if c.sm != nil { // else the store's own commands
			if c.sm[id] == nil {
				c.sm[id] = &recorder{}
			}
			gc.Machine = c.sm[id]
		}
		if err := h.AddGroup(ctx, gc); err != nil {
			c.t.Fatal(err)
		}
		c.net.Attach(id, h)
		c.net.Heal(id)
	}
	h.Start(ctx)
	c.nodes[i] = nd
}

// stop stops node i's host and closes its stores, as a node that shut
// down; its replicas are cut off until it starts again.
func (c *testCluster) stop(i int) {
	nd := c.nodes[i]
	if nd == nil {
		return
	}
	c.nodes[i] = nil
	for _, g := range c.groups {
		c.net.Cut(rid(g, i))
	}
	nd.host.Stop()
	for _, s := range nd.stores {
		if err := s.Close(); err != nil {
			c.t.Error(err)
		}
	}
}

// waitFor polls cond until it holds; the deadline only keeps a broken
// test from hanging.
func (c *testCluster) waitFor(what string, cond func() bool) {
	c.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			c.t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// leader waits for a node that leads group g and returns its index.
func (c *testCluster) leader(g uint64) int {
	c.t.Helper()
	at := -1
	c.waitFor(fmt.Sprintf("a leader of group %d", g), func() bool {
		for i, nd := range c.nodes {
			if nd == nil {
				continue
			}
			st, err := nd.host.Status(g)
			if err != nil {
				c.t.Fatal(err)
			}
			if st.RaftState == raft.StateLeader {
				at = i
				return true
			}
		}
		return false
	})
	return at
}

// propose proposes cmd through node i until it is applied there. A
// proposal dropped for want of a leader is proposed again: it never
// entered the log.
func (c *testCluster) propose(i int, g uint64, cmd string) {
	c.t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := c.nodes[i].host.Propose(ctx, g, []byte(cmd))
		cancel()
		if errors.Is(err, raft.ErrProposalDropped) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			c.t.Fatalf("propose %q through node %d: %v", cmd, i, err)
		}
		return
	}
}

// converged waits until every replica of g applied n commands and checks
// they applied the same ones in the same order.
func (c *testCluster) converged(g uint64, n int) []string {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("group %d's replicas to apply %d commands", g, n), func() bool {
		for i, nd := range c.nodes {
			if nd != nil {
				if _, err := nd.host.Status(g); err != nil { // stopped on an error: it will never apply
					c.t.Fatal(err)
				}
			}
			if len(c.sm[rid(g, i)].applied()) < n {
				return false
			}
		}
		return true
	})
	want := c.sm[rid(g, 0)].applied()
	for i := 1; i < len(c.nodes); i++ {
		if got := c.sm[rid(g, i)].applied(); !slices.Equal(got, want) {
			c.t.Fatalf("group %d: replica %d applied %q, replica 0 %q", g, i, got, want)
		}
	}
	if len(want) != n {
		c.t.Fatalf("group %d applied %d commands, %d were proposed: %q", g, len(want), n, want)
	}
	return want
}

// Three replicas of two groups on three hosts elect a leader per group;
// commands proposed through every node, leaders and followers alike, are
// applied once each, by every replica in the same order, and the
// commands of one proposer in the order it proposed them.
func TestGroupsElectAndApplyInOrder(t *testing.T) {
	c := newTestCluster(t, 0, 1)
	const perProposer = 15
	var wg sync.WaitGroup
	for _, g := range c.groups {
		c.leader(g)
		for i := range c.nodes {
			wg.Go(func() {
				for k := range perProposer {
					c.propose(i, g, fmt.Sprintf("g%d n%d k%02d", g, i, k))
				}
			})
		}
	}
	wg.Wait()
	for _, g := range c.groups {
		got := c.converged(g, 3*perProposer)
		for i := range c.nodes {
			var mine []string
			for _, cmd := range got {
				if cmd[:len(fmt.Sprintf("g%d n%d", g, i))] == fmt.Sprintf("g%d n%d", g, i) {
					mine = append(mine, cmd)
				}
			}
			if !slices.IsSorted(mine) || len(mine) != perProposer {
				t.Fatalf("group %d: node %d's commands applied as %q", g, i, mine)
			}
		}
	}
}

// The leader's node stops: the two others elect a new leader and commit
// without it; started again from its store, the old leader catches up
// from the new leader's log, applying each missed command once, in order.
func TestRestartedReplicaCatchesUpFromTheLog(t *testing.T) {
	c := newTestCluster(t, 3)
	const g = 3
	for k := range 10 {
		c.propose(k%3, g, fmt.Sprintf("before %02d", k))
	}
	c.converged(g, 10)
	old := c.leader(g)
	c.stop(old)
	next := c.leader(g)
	if next == old {
		t.Fatalf("node %d still leads after it stopped", old)
	}
	for k := range 20 {
		c.propose(next, g, fmt.Sprintf("while down %02d", k))
	}
	if n := len(c.sm[rid(g, old)].applied()); n != 10 {
		t.Fatalf("the stopped replica applied %d commands, want 10", n)
	}
	c.start(old)
	got := c.converged(g, 30)
	if got[9] != "before 09" || got[29] != "while down 19" {
		t.Fatalf("applied %q", got)
	}
	last, err := c.nodes[old].stores[g].RaftLog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if first, _ := last.FirstIndex(); first != 2 {
		t.Fatalf("the log was truncated to %d: it caught up by something other than the log", first)
	}
}

// A leader cut off from both peers cannot commit: a command proposed to
// it is never applied by any replica, even after it rejoins, while the
// majority elects a leader and goes on.
func TestCutOffLeaderCommitsNothing(t *testing.T) {
	c := newTestCluster(t, 5)
	const g = 5
	c.propose(0, g, "before")
	c.converged(g, 1)
	old := c.leader(g)
	c.net.Cut(rid(g, old))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := c.nodes[old].host.Propose(ctx, g, []byte("minority"))
	cancel()
	if err == nil {
		t.Fatal("a leader cut off from its peers applied a command")
	}
	next := -1
	c.waitFor("a leader among the majority", func() bool {
		for i, nd := range c.nodes {
			if st, _ := nd.host.Status(g); i != old && st.RaftState == raft.StateLeader {
				next = i
				return true
			}
		}
		return false
	})
	c.propose(next, g, "majority")
	c.net.Heal(rid(g, old))
	if got := c.converged(g, 2); !slices.Equal(got, []string{"before", "majority"}) {
		t.Fatalf("applied %q (proposal through the cut-off leader: %v)", got, err)
	}
}
