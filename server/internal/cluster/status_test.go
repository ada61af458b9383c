package cluster

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
)

// TestClusterStatus: status names every node of the map and every
// registered one, with its URL, whether it runs and the shards it holds;
// and every shard with its home, its owner and epoch, or unavailable while
// nobody owns it. A second process with a running node's ID is refused.
func TestClusterStatus(t *testing.T) {
	t.Parallel() // waits out real lease TTLs, on an etcd of its own
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := Keys{Name: "chat"}
	c := srv.Client(t)
	if err := CreateCluster(ctx, c, k, 4, []string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	start := func(node, owner string) (*Owner, error) {
		return StartOwner(ctx, OwnerOptions{Client: srv.Client(t), Keys: k, Node: node, Owner: owner,
			URL: "http://127.0.0.1:80" + node[:1], TTL: 5 * time.Second})
	}
	a, err := start("a", "a/1")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := start("b", "b/1")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e0, err := a.WaitOwned(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitOwned(ctx, 3, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WaitOwned(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}

	if _, err := start("a", "a/2"); !errors.Is(err, ErrNodeIDInUse) {
		t.Fatalf("second process as node a = %v, want ErrNodeIDInUse", err)
	}

	st, err := ReadStatus(ctx, c, k)
	if err != nil {
		t.Fatal(err)
	}
	wantNodes := []NodeStatus{
		{ID: "a", URL: "http://127.0.0.1:80a", Alive: true, Shards: []int{0, 3}},
		{ID: "b", URL: "http://127.0.0.1:80b", Alive: true, Shards: []int{1}},
		{ID: "c", Shards: []int{2}},
	}
	if !slices.EqualFunc(st.Nodes, wantNodes, nodeEqual) {
		t.Fatalf("nodes = %+v, want %+v", st.Nodes, wantNodes)
	}
	if s := st.Shards[0]; s.Owner != "a" || s.Home != "a" || s.Epoch != e0 || s.State != ShardOwned {
		t.Fatalf("shard 0 = %+v, want owned by a at epoch %d", s, e0)
	}
	if s := st.Shards[2]; s.Owner != "" || s.Home != "c" || s.Epoch != 0 || s.State != ShardUnavailable {
		t.Fatalf("shard 2 = %+v, want unavailable (c never started)", s)
	}

	// A node that stops gives its shards and its registration up at once.
	a.Close()
	st, err = ReadStatus(ctx, c, k)
	if err != nil {
		t.Fatal(err)
	}
	if st.Nodes[0].Alive || st.Shards[0].State != ShardUnavailable || st.Shards[3].State != ShardUnavailable ||
		st.Shards[1].State != ShardOwned {
		t.Fatalf("after a stopped: %+v", st)
	}
}

func nodeEqual(a, b NodeStatus) bool {
	return a.ID == b.ID && a.URL == b.URL && a.Alive == b.Alive && slices.Equal(a.Shards, b.Shards)
}
