package router_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/router"
)

// A node's view learns each replicated shard's leader from its record,
// follows a later leader's, and forgets a record once it is deleted.
func TestViewLearnsLeaders(t *testing.T) {
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	k := cluster.Keys{Name: "chat"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := cluster.CreateCluster(ctx, c, k, 3, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	v, err := router.NewView(ctx, c, k, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := v.Leader(1); ok {
		t.Fatal("a leader before any record")
	}
	leaders := make(map[string]*cluster.Leaders)
	for _, node := range []string{"a", "b"} {
		p, err := cluster.NewLeaders(cluster.LeadersOptions{Client: c, Keys: k, Node: node, TTL: 2 * time.Second,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		p.Start(ctx)
		defer p.Stop()
		leaders[node] = p
	}
	sees := func(what string, n int, want cluster.Leader, present bool) {
		t.Helper()
		for end := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			if got, ok := v.Leader(n); ok == present && got == want {
				return
			}
			if time.Now().After(end) {
				got, ok := v.Leader(n)
				t.Fatalf("%s: the view has %+v (%v)", what, got, ok)
			}
		}
	}
	leaders["a"].Lead(1, 2, 11)
	sees("a's record", 1, cluster.Leader{Node: "a", Term: 2, Replica: 11}, true)
	leaders["b"].Lead(1, 3, 12)
	sees("b's record of a later term", 1, cluster.Leader{Node: "b", Term: 3, Replica: 12}, true)
	leaders["b"].StepDown(1)
	sees("the record deleted", 1, cluster.Leader{}, false)
}

// The view counts the replicated shards with fewer healthy replicas than
// asked for, from the leader records and the nodes' progress reports:
// none while the leader hears from every replica, one while a replica is
// inactive, one when the node of a replica is gone, and every shard while
// no leader is known.
func TestViewCountsUnderReplicated(t *testing.T) {
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	k := cluster.Keys{Name: "chat"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := []string{"a", "b", "c"}
	m, _, err := cluster.EnsureReplicated(ctx, c, k, 2, 3, nodes)
	if err != nil {
		t.Fatal(err)
	}
	v, err := router.NewView(ctx, c, k, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	count := func(what string, want int) {
		t.Helper()
		for end := time.Now().Add(time.Minute); v.UnderReplicated() != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s: %d shards under-replicated, want %d", what, v.UnderReplicated(), want)
			}
		}
	}
	count("no leader known", 2)

	// Node a leads both shards; whether it hears from c is set below.
	var mu sync.Mutex
	cActive := true
	leads := func() []replica.GroupStatus {
		mu.Lock()
		defer mu.Unlock()
		var out []replica.GroupStatus
		for n := range m.Shards {
			g := replica.GroupStatus{Group: uint64(n), Role: replica.RoleLeader, Term: 2}
			for _, r := range m.Sets[n] {
				if r.Node == "a" {
					g.Replica, g.Leader = r.ID, r.ID
				}
				g.Peers = append(g.Peers, replica.PeerStatus{Replica: r.ID, Active: r.Node != "c" || cActive})
			}
			out = append(out, g)
		}
		return out
	}
	regs := map[string]*cluster.Registration{}
	for _, node := range nodes {
		reg, err := cluster.Register(ctx, cluster.OwnerOptions{Client: c, Keys: k, Node: node, URL: "http://" + node,
			Owner: node + "/1", TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		regs[node] = reg
	}
	defer regs["a"].Release()
	defer regs["b"].Release()
	rep, err := cluster.NewProgressReporter(cluster.ProgressOptions{Client: c, Keys: k, Node: "a", TTL: 5 * time.Second,
		Every: 20 * time.Millisecond, Statuses: leads, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rep.Start(ctx)
	defer rep.Stop()
	pub, err := cluster.NewLeaders(cluster.LeadersOptions{Client: c, Keys: k, Node: "a", TTL: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	pub.Start(ctx)
	defer pub.Stop()
	for n := range m.Shards {
		r, _ := m.ReplicaOn(n, "a")
		pub.Lead(n, 2, r.ID)
	}
	count("every replica heard from", 0)
	mu.Lock()
	cActive = false
	mu.Unlock()
	count("c's replicas inactive", 2)
	mu.Lock()
	cActive = true
	mu.Unlock()
	count("c's replicas heard from again", 0)
	if err := regs["c"].Release(); err != nil {
		t.Fatal(err)
	}
	count("node c gone", 2)
}
