package cluster

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
)

// TestCreateReplicatedCluster: `cluster create --replicas 3` gives every
// shard three replicas on distinct nodes, placed round robin from the
// shard's home, with Raft IDs taken from the counter in etcd, which moves
// past them. The same creation again changes nothing; another replica
// count is refused like another shard count.
func TestCreateReplicatedCluster(t *testing.T) {
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	k := Keys{Name: "chat"}
	nodes := []string{"a", "b", "c", "d"}
	// IDs handed out before (a cluster created and removed under this
	// name) are never given again.
	if _, err := c.Put(ctx, k.ReplicaIDs(), "100"); err != nil {
		t.Fatal(err)
	}
	m, created, err := EnsureReplicated(ctx, c, k, 6, 3, nodes)
	if err != nil || !created {
		t.Fatalf("create: created %v, %v", created, err)
	}
	if m.ReplicaCount() != 3 || !m.Replicated() || len(m.Sets) != 6 {
		t.Fatalf("map %+v", m)
	}
	seen := map[uint64]bool{}
	perNode := map[string]int{}
	for n, set := range m.Sets {
		if len(set) != 3 {
			t.Fatalf("shard %d: %d replicas", n, len(set))
		}
		for i, r := range set {
			if want := nodes[(n+i)%len(nodes)]; r.Node != want {
				t.Errorf("shard %d replica %d on %s, want %s (round robin from its home)", n, i, r.Node, want)
			}
			if r.ID < 100 || seen[r.ID] {
				t.Errorf("shard %d: replica ID %d reused or below the counter", n, r.ID)
			}
			seen[r.ID] = true
			perNode[r.Node]++
		}
		if m.Homes[n] != set[0].Node {
			t.Errorf("shard %d: home %s, first replica on %s", n, m.Homes[n], set[0].Node)
		}
		if got := m.Voters(n); len(got) != 3 || got[0] != set[0].ID {
			t.Errorf("shard %d voters %v", n, got)
		}
	}
	for _, nd := range nodes {
		if perNode[nd] < 4 || perNode[nd] > 5 {
			t.Errorf("node %s has %d replicas of 18: the load is not spread", nd, perNode[nd])
		}
		if !slices.Equal(m.HeldBy(nd), heldOf(m, nd)) || m.OwnedBy(nd) != nil {
			t.Errorf("node %s: held %v, owned %v", nd, m.HeldBy(nd), m.OwnedBy(nd))
		}
	}
	if node, ok := m.ReplicaNode(m.Sets[2][1].ID); !ok || node != m.Sets[2][1].Node {
		t.Errorf("ReplicaNode = %s, %v", node, ok)
	}
	got, err := c.Get(ctx, k.ReplicaIDs())
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != strconv.Itoa(100+18) {
		t.Fatalf("counter after creation: %v %v", got, err)
	}

	again, created, err := EnsureReplicated(ctx, c, k, 6, 3, nodes)
	if err != nil || created || !slices.EqualFunc(again.Sets, m.Sets, slices.Equal) {
		t.Fatalf("the same creation again: created %v, %v, sets %v", created, err, again.Sets)
	}
	var rc *ReplicaCountError
	if _, _, err := EnsureReplicated(ctx, c, k, 6, 5, append(slices.Clone(nodes), "e")); !errors.As(err, &rc) || rc.Recorded != 3 || rc.Asked != 5 {
		t.Errorf("another replica count: %v", err)
	}
	if err := CreateCluster(ctx, c, k, 6, nodes); !errors.As(err, &rc) || rc.Asked != 1 {
		t.Errorf("one replica on a replicated cluster: %v", err)
	}
	if read, err := ReadMap(ctx, c, k); err != nil || !slices.EqualFunc(read.Sets, m.Sets, slices.Equal) {
		t.Fatalf("map after the refusals: %v, %v", read.Sets, err)
	}
}

func heldOf(m Map, node string) []int {
	var out []int
	for n := range m.Sets {
		if _, ok := m.ReplicaOn(n, node); ok {
			out = append(out, n)
		}
	}
	return out
}

// TestReplicaCountRefused: a count that is not 1, 3 or 5, or more than
// the nodes, creates nothing; nor does a replicated creation while a node
// holds a shard folder.
func TestReplicaCountRefused(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	k := Keys{Name: "chat"}
	for _, tc := range []struct {
		replicas int
		nodes    []string
	}{{2, []string{"a", "b", "c"}}, {3, []string{"a", "b"}}, {0, []string{"a"}}, {7, []string{"a", "b", "c", "d", "e", "f", "g"}}} {
		if _, _, err := EnsureReplicated(ctx, c, k, 4, tc.replicas, tc.nodes); !errors.Is(err, ErrReplicaCount) {
			t.Errorf("%d replicas over %v: %v", tc.replicas, tc.nodes, err)
		}
	}
	if err := ReportHeld(ctx, c, k, "b", []HeldShard{{Shard: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := EnsureReplicated(ctx, c, k, 4, 3, []string{"a", "b", "c"}); !errors.Is(err, ErrReplicatedHeld) {
		t.Errorf("a node holding a shard: %v", err)
	}
	if _, err := ReadMap(ctx, c, k); !errors.Is(err, ErrNoCluster) {
		t.Errorf("a refused creation left a map: %v", err)
	}
	if got, err := c.Get(ctx, k.ReplicaIDs()); err != nil || len(got.Kvs) != 0 {
		t.Errorf("a refused creation took replica IDs: %v %v", got, err)
	}
}
