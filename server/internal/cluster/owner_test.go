package cluster

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/pkg/store"
)

func TestCreateClusterSpreadsShards(t *testing.T) {
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	k := Keys{Name: "chat"}
	if _, err := ReadMap(ctx, c, k); !errors.Is(err, ErrNoCluster) {
		t.Fatalf("ReadMap before creation = %v, want ErrNoCluster", err)
	}
	if err := CreateCluster(ctx, c, k, 5, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	m, err := ReadMap(ctx, c, k)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Homes, []string{"a", "b", "a", "b", "a"}) || !slices.Equal(m.HeldBy("b"), []int{1, 3}) {
		t.Fatalf("map = %+v", m)
	}
	// Created once: the same creation again changes nothing; one with
	// other nodes or another number of shards is refused.
	if got, created, err := EnsureCluster(ctx, c, k, 5, []string{"a", "b"}); err != nil || created || !slices.Equal(got.Homes, m.Homes) {
		t.Fatalf("same creation again: %+v created=%v err=%v", got, created, err)
	}
	var nodesErr *ClusterNodesError
	for _, nodes := range [][]string{{"c"}, {"b", "a"}, {"a", "b", "c"}} {
		err := CreateCluster(ctx, c, k, 5, nodes)
		if !errors.As(err, &nodesErr) || !errors.Is(err, ErrClusterNodes) || !slices.Equal(nodesErr.Recorded, []string{"a", "b"}) {
			t.Fatalf("creation with nodes %v = %v, want a ClusterNodesError", nodes, err)
		}
	}
	if m2, _ := ReadMap(ctx, c, k); !slices.Equal(m2.Homes, m.Homes) {
		t.Fatalf("refused creations changed the map: %+v", m2)
	}
	if err := CreateCluster(ctx, c, k, 8, []string{"a", "b"}); !errors.Is(err, ErrShardCount) {
		t.Fatalf("another shard count = %v, want ErrShardCount", err)
	}
	if err := CreateCluster(ctx, c, k, 5, []string{"a", "a"}); err == nil {
		t.Fatal("a node named twice was accepted")
	}
}

// TestCreateClusterAfterRecordedCount: a shard count recorded alone (by
// RecordShards) does not pass for a created cluster: the creation writes
// the map when the count agrees and is refused when it does not.
func TestCreateClusterAfterRecordedCount(t *testing.T) {
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		recorded int
		wantErr  error
	}{{"agrees", 4, nil}, {"differs", 8, ErrShardCount}} {
		k := Keys{Name: tc.name}
		if err := RecordShards(ctx, c, k, tc.recorded); err != nil {
			t.Fatal(err)
		}
		_, created, err := EnsureCluster(ctx, c, k, 4, []string{"a", "b"})
		if !errors.Is(err, tc.wantErr) || created != (tc.wantErr == nil) {
			t.Fatalf("%s: created=%v err=%v, want %v", tc.name, created, err, tc.wantErr)
		}
		_, err = ReadMap(ctx, c, k)
		if (tc.wantErr == nil) != (err == nil) {
			t.Fatalf("%s: map after creation: %v", tc.name, err)
		}
	}
}

// TestOwnerFencesADeposedEpoch: each node owns the shards whose data it
// holds and no other; when a node's ownership lease ends behind its back
// (etcd expired it while the node was paused), the node takes the shard
// again with a larger epoch, and a write still carrying the old epoch is
// refused by the shard's store once the new one has written.
func TestOwnerFencesADeposedEpoch(t *testing.T) {
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := Keys{Name: "chat"}
	if err := CreateCluster(ctx, c, k, 2, []string{"node-a", "node-b"}); err != nil {
		t.Fatal(err)
	}
	start := func(node string) *Owner {
		w, err := StartOwner(ctx, OwnerOptions{Client: srv.Client(t), Keys: k, Node: node, Owner: node + "/1", TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		return w
	}
	a, b := start("node-a"), start("node-b")
	e1, err := a.WaitOwned(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.WaitOwned(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Epoch(1); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("node-a Epoch(1) = %v, want ErrNotOwner", err)
	}
	if _, err := b.Fence(ctx, 0); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("node-b Fence(0) = %v, want ErrNotOwner", err)
	}

	st, err := store.Open(filepath.Join(t.TempDir(), "shards", "0"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	old, err := a.Fence(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateThread(old, store.Thread{ID: "t1", Title: "x", Author: "y"}); err != nil {
		t.Fatal(err)
	}

	// etcd ends node-a's lease on shard 0, as it does when a paused node
	// misses its TTL.
	get, err := c.Get(ctx, k.ShardOwner(0))
	if err != nil || len(get.Kvs) != 1 {
		t.Fatalf("owner key: %v %v", get, err)
	}
	srv.Revoke(t, clientv3.LeaseID(get.Kvs[0].Lease))
	e2, err := a.WaitOwned(ctx, 0, e1)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := a.Fence(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateThread(cur, store.Thread{ID: "t2", Title: "x", Author: "y"}); err != nil {
		t.Fatal(err)
	}
	// The paused holder's late write, under epoch e1, after the shard was
	// taken again under e2.
	_, err = st.CreateThread(old, store.Thread{ID: "t3", Title: "x", Author: "y"})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("late write under epoch %d after %d = %v, want ErrFenced", e1, e2, err)
	}
	if got := st.Epoch(); got != e2 {
		t.Fatalf("store epoch %d, want %d", got, e2)
	}
	if got := b.Owned(); !slices.Equal(got, []int{1}) {
		t.Fatalf("node-b owns %v, want only its own shard 1", got)
	}
}

// TestOwnerReportsEtcdErrors: once etcd is out of reach, the renewals of
// the ownerships and of the registration that fail are reported
// (progressdb_cluster_etcd_errors_total), and the shard is lost.
func TestOwnerReportsEtcdErrors(t *testing.T) {
	t.Parallel() // waits out real lease TTLs, on an etcd of its own
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := Keys{Name: "chat"}
	if err := CreateCluster(ctx, srv.Client(t), k, 1, []string{"node-a"}); err != nil {
		t.Fatal(err)
	}
	var errs atomic.Int64
	w, err := StartOwner(ctx, OwnerOptions{Client: srv.Client(t), Keys: k, Node: "node-a", Owner: "node-a/1", TTL: 3 * time.Second,
		OnEtcdError: func(error) { errs.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WaitOwned(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	if n := errs.Load(); n != 0 {
		t.Fatalf("%d etcd errors before the partition", n)
	}
	srv.Partition()
	for errs.Load() == 0 || len(w.Owned()) != 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("after the partition: %d etcd errors, owned %v", errs.Load(), w.Owned())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// A node whose registration etcd ended while it runs (its lease expired
// under a long pause, or revoked) registers again under a new lease, with
// its URL, and says so (OnRegistered): the other nodes' guards find it
// again.
func TestOwnerRegistersAgainAfterItsLeaseEnds(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := Keys{Name: "chat"}
	if err := CreateCluster(ctx, c, k, 1, []string{"node-a"}); err != nil {
		t.Fatal(err)
	}
	var again atomic.Int64
	w, err := StartOwner(ctx, OwnerOptions{Client: c, Keys: k, Node: "node-a", Owner: "node-a/1", URL: "https://a.example:7000",
		TTL: 5 * time.Second, OnRegistered: func(context.Context) { again.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	registered := func() (clientv3.LeaseID, string) {
		get, err := c.Get(ctx, k.Node("node-a"))
		if err != nil {
			t.Fatal(err)
		}
		if len(get.Kvs) == 0 {
			return 0, ""
		}
		return clientv3.LeaseID(get.Kvs[0].Lease), string(get.Kvs[0].Value)
	}
	first, _ := registered()
	if first == 0 {
		t.Fatal("node-a is not registered")
	}
	srv.Revoke(t, first)
	waitFor(t, "node-a registered again", func() bool {
		lease, value := registered()
		return lease != 0 && lease != first && strings.Contains(value, "https://a.example:7000")
	})
	waitFor(t, "OnRegistered", func() bool { return again.Load() == 1 })
}
