package router_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
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
