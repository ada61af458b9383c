package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// replicaNode is one node of a replicated cluster in a test: registered,
// running a replica of every shard, publishing its leader records and
// its progress.
type replicaNode struct {
	reg  *Registration
	host *replica.Host
	rep  *ProgressReporter
	pub  *Leaders
}

func (n *replicaNode) stop() {
	n.host.Stop()
	n.rep.Stop()
	n.pub.Stop()
	_ = n.reg.Release()
}

// Status shows a replicated shard's leader as its owner, with the term as
// the epoch, and each replica's role, applied index, lag and whether the
// leader hears from it, from the nodes' progress reports. A node that
// stops leaves its replicas unknown and inactive, and its shards
// under-replicated.
func TestClusterStatusShowsReplicas(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	ctx := context.Background()
	k := Keys{Name: "chat"}
	c := srv.Client(t)
	names := []string{"a", "b", "c"}
	m, _, err := EnsureReplicated(ctx, c, k, 2, 3, names)
	if err != nil {
		t.Fatal(err)
	}
	net := replica.NewLocal()
	nodes := map[string]*replicaNode{}
	for _, name := range names {
		reg, err := Register(ctx, OwnerOptions{Client: srv.Client(t), Keys: k, Node: name, URL: "http://" + name,
			Owner: name + "/1", TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		pub := startLeaders(t, srv.Client(t), k, name)
		h, err := replica.NewHost(replica.Config{Transport: net, Tick: 10 * time.Millisecond, ElectionTicks: 30,
			Logger: slog.New(slog.DiscardHandler),
			OnLeadership: func(l replica.Leadership) {
				if l.Leading() {
					pub.Lead(int(l.Group), l.Term, l.Replica)
				} else {
					pub.StepDown(int(l.Group))
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		for n := range m.Shards {
			r, _ := m.ReplicaOn(n, name)
			s, err := store.Open(filepath.Join(t.TempDir(), "shard"), store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if err := h.AddGroup(ctx, replica.GroupConfig{Group: uint64(n), Replica: r.ID, Peers: m.Voters(n), Store: s,
				Machine: nopMachine{}}); err != nil {
				t.Fatal(err)
			}
			net.Attach(r.ID, h)
		}
		h.Start(ctx)
		rep, err := NewProgressReporter(ProgressOptions{Client: srv.Client(t), Keys: k, Node: name, TTL: 5 * time.Second,
			Every: 20 * time.Millisecond, Statuses: h.Statuses, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		rep.Start(ctx)
		nd := &replicaNode{reg: reg, host: h, rep: rep, pub: pub}
		nodes[name] = nd
		t.Cleanup(nd.stop)
	}

	var st Status
	healthy := func() bool {
		if st, err = ReadStatus(ctx, c, k); err != nil {
			t.Fatal(err)
		}
		for _, s := range st.Shards {
			leaders := 0
			for _, r := range s.Replicas {
				if r.Role == replica.RoleLeader {
					leaders++
				}
				if r.Role == RoleUnknown || !r.Active || r.Lag != 0 || r.Applied < 2 {
					return false
				}
			}
			if s.State != ShardOwned || s.UnderReplicated || leaders != 1 || len(s.Replicas) != 3 {
				return false
			}
		}
		return true
	}
	waitFor(t, "every shard led, its replicas active and caught up", healthy)
	for _, s := range st.Shards {
		gs, err := nodes[s.Owner].host.GroupStatus(uint64(s.N))
		if err != nil {
			t.Fatal(err)
		}
		if gs.Role != replica.RoleLeader || s.Epoch != int64(gs.Term) {
			t.Fatalf("shard %d: owner %s epoch %d, its host says %+v", s.N, s.Owner, s.Epoch, gs)
		}
		for i, r := range s.Replicas {
			if r.ID != m.Sets[s.N][i].ID || r.Node != m.Sets[s.N][i].Node {
				t.Fatalf("shard %d: replica %+v, the map's %+v", s.N, r, m.Sets[s.N][i])
			}
		}
	}
	for _, nd := range st.Nodes {
		if !nd.Alive || fmt.Sprint(nd.Shards) != "[0 1]" {
			t.Fatalf("node %+v: every node holds a replica of both shards", nd)
		}
	}

	nodes["c"].stop()
	for n := range m.Shards {
		r, _ := m.ReplicaOn(n, "c")
		net.Cut(r.ID)
	}
	waitFor(t, "node c's replicas unknown and inactive, every shard under-replicated", func() bool {
		if st, err = ReadStatus(ctx, c, k); err != nil {
			t.Fatal(err)
		}
		for _, s := range st.Shards {
			if !s.UnderReplicated || s.State != ShardOwned || s.Owner == "c" {
				return false
			}
			for _, r := range s.Replicas {
				if r.Node == "c" && (r.Role != RoleUnknown || r.Active) {
					return false
				}
			}
		}
		return true
	})
}
