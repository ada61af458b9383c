package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/raft/v3"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// leaderOf reads shard n's leader record, directly from etcd.
func leaderOf(t *testing.T, c *clientv3.Client, k Keys, n int) (Leader, clientv3.LeaseID, bool) {
	t.Helper()
	get, err := c.Get(context.Background(), k.ShardLeader(n))
	if err != nil {
		t.Fatal(err)
	}
	if len(get.Kvs) == 0 {
		return Leader{}, 0, false
	}
	l, err := ParseLeader(get.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return l, clientv3.LeaseID(get.Kvs[0].Lease), true
}

func startLeaders(t *testing.T, c *clientv3.Client, k Keys, node string) *Leaders {
	t.Helper()
	p, err := NewLeaders(LeadersOptions{Client: c, Keys: k, Node: node, TTL: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	p.Start(context.Background())
	t.Cleanup(p.Stop)
	return p
}

// A leader record names the node and term of the latest leader: a later
// term replaces it, an earlier one never does, a step down deletes only
// the node's own record. The records live under the node's session: a
// lost session's are published again under a new one, and a stopped
// node's go at once.
func TestLeaderRecordsFollowTerms(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	direct := srv.DirectClient(t)
	k := Keys{Name: "chat"}
	a, b := startLeaders(t, srv.Client(t), k, "a"), startLeaders(t, srv.Client(t), k, "b")
	is := func(n int, want Leader) func() bool {
		return func() bool { got, _, ok := leaderOf(t, direct, k, n); return ok && got == want }
	}
	gone := func(n int) func() bool {
		return func() bool { _, _, ok := leaderOf(t, direct, k, n); return !ok }
	}

	a.Lead(0, 5, 1)
	waitFor(t, "a's record", is(0, Leader{"a", 5, 1}))
	b.Lead(0, 6, 2)
	waitFor(t, "b's record of a later term", is(0, Leader{"b", 6, 2}))

	b.Lead(1, 7, 2)
	waitFor(t, "b's record of shard 1", is(1, Leader{"b", 7, 2}))
	a.Lead(1, 3, 1) // a late report of an earlier term
	a.Lead(2, 1, 1)
	waitFor(t, "a's record of shard 2", is(2, Leader{"a", 1, 1}))
	a.StepDown(0)
	a.StepDown(2)
	waitFor(t, "a's record of shard 2 deleted", gone(2))
	a.Stop()
	for n, want := range map[int]Leader{0: {"b", 6, 2}, 1: {"b", 7, 2}} {
		if !is(n, want)() {
			got, _, _ := leaderOf(t, direct, k, n)
			t.Fatalf("shard %d's record is %+v after a's late and stepped-down reports, want %+v", n, got, want)
		}
	}

	// b's session expires (revoked, as etcd does when its TTL runs out).
	_, lease, _ := leaderOf(t, direct, k, 0)
	srv.Revoke(t, lease)
	waitFor(t, "b's records published again", func() bool {
		_, l0, ok0 := leaderOf(t, direct, k, 0)
		_, l1, ok1 := leaderOf(t, direct, k, 1)
		return ok0 && ok1 && l0 != lease && l1 == l0
	})
	b.StepDown(0)
	waitFor(t, "b's stepped-down record deleted", gone(0))
	b.Stop()
	if !gone(1)() {
		t.Fatal("a stopped node's record outlived it")
	}
}

// Three replicas of a group, each node publishing what its host tells
// it: the record names the leader's node and term; when the leader's
// node stops without a word, the new leader's record replaces its.
func TestLeaderRecordFollowsRaft(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	direct := srv.DirectClient(t)
	k := Keys{Name: "chat"}
	const g = 4
	net := replica.NewLocal()
	var hosts [3]*replica.Host
	var pubs [3]*Leaders
	ctx := context.Background()
	for i := range hosts {
		pubs[i] = startLeaders(t, srv.Client(t), k, fmt.Sprintf("n%d", i))
		p := pubs[i]
		h, err := replica.NewHost(replica.Config{Transport: net, Tick: 10 * time.Millisecond, ElectionTicks: 30,
			Logger: slog.New(slog.DiscardHandler),
			OnLeadership: func(l replica.Leadership) {
				if l.Leading() {
					p.Lead(int(l.Group), l.Term, l.Replica)
				} else {
					p.StepDown(int(l.Group))
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		s, err := store.Open(filepath.Join(t.TempDir(), "shard"), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		if err := h.AddGroup(ctx, replica.GroupConfig{Group: g, Replica: uint64(i + 1), Peers: []uint64{1, 2, 3}, Store: s,
			Machine: nopMachine{}}); err != nil {
			t.Fatal(err)
		}
		net.Attach(uint64(i+1), h)
		h.Start(ctx)
		t.Cleanup(h.Stop)
		hosts[i] = h
	}
	// leading waits for a host other than skip leading g, and for the
	// record to name it.
	leading := func(skip int) (int, uint64) {
		at, term := -1, uint64(0)
		waitFor(t, "a leader's record", func() bool {
			for i, h := range hosts {
				if st, err := h.Status(g); i != skip && err == nil && st.RaftState == raft.StateLeader {
					at, term = i, st.GetTerm()
					got, _, ok := leaderOf(t, direct, k, g)
					return ok && got == Leader{Node: fmt.Sprintf("n%d", i), Term: term, Replica: uint64(i + 1)}
				}
			}
			return false
		})
		return at, term
	}
	old, term := leading(-1)
	hosts[old].Stop()
	net.Cut(uint64(old + 1))
	if _, next := leading(old); next <= term {
		t.Fatalf("the new leader's term %d is not after %d", next, term)
	}
}

// nopMachine applies nothing: the test is about who leads.
type nopMachine struct{}

func (nopMachine) Apply(context.Context, uint64, uint64, []byte) error { return nil }
