package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// The next membership step, from a set and a leader's view of its group.
func TestNextStep(t *testing.T) {
	caught := func(id uint64) replica.PeerStatus {
		return replica.PeerStatus{Replica: id, Match: 100, Active: true}
	}
	behind := replica.PeerStatus{Replica: 4, Match: 10, Lag: PromoteLag + 1, Active: true}
	move := []Replica{{ID: 1, Node: "a", Leaving: true}, {ID: 2, Node: "b"}, {ID: 3, Node: "c"}, {ID: 4, Node: "d", Added: true}}
	for _, tc := range []struct {
		name             string
		self             uint64
		set              []Replica
		voters, learners []uint64
		peers            []replica.PeerStatus
		want             memberStep
	}{
		{"the group is its set", 1, move[1:3:3], []uint64{2, 3}, nil, nil, memberStep{kind: stepNone}},
		{"a new replica is added as learner first", 2, move, []uint64{1, 2, 3}, nil, nil, memberStep{stepAddLearner, 4}},
		{"a learner behind waits", 2, move, []uint64{1, 2, 3}, []uint64{4}, []replica.PeerStatus{behind}, memberStep{stepWait, 4}},
		{"a learner never heard from waits", 2, move, []uint64{1, 2, 3}, []uint64{4}, nil, memberStep{stepWait, 4}},
		{"a learner caught up is promoted", 2, move, []uint64{1, 2, 3}, []uint64{4}, []replica.PeerStatus{caught(4)}, memberStep{stepPromote, 4}},
		{"then the leaving one is removed", 2, move, []uint64{1, 2, 3, 4}, nil, nil, memberStep{stepRemove, 1}},
		{"a leaving leader hands over to the furthest voter", 1, move, []uint64{1, 2, 3, 4}, nil,
			[]replica.PeerStatus{caught(1), {Replica: 2, Match: 90, Active: true}, caught(3), {Replica: 4, Match: 100}},
			memberStep{stepTransfer, 3}},
		{"a leaving leader with no active voter waits", 1, move, []uint64{1, 2, 3, 4}, nil, nil, memberStep{kind: stepWait}},
		{"a removed replica leaves the set", 2, move, []uint64{2, 3, 4}, nil, nil, memberStep{stepDrop, 1}},
		{"a learner outside the set is removed", 2, move[1:3:3], []uint64{2, 3}, []uint64{9}, nil, memberStep{stepRemove, 9}},
		{"fewer replicas: the leaving ones go", 2, []Replica{{ID: 2}, {ID: 3}, {ID: 5}, {ID: 6, Leaving: true}, {ID: 7, Leaving: true}},
			[]uint64{2, 3, 5, 6, 7}, nil, nil, memberStep{stepRemove, 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextStep(tc.self, tc.set, tc.voters, tc.learners, tc.peers); got != tc.want {
				t.Fatalf("got %v %d, want %v %d", got.kind, got.replica, tc.want.kind, tc.want.replica)
			}
		})
	}
}

// Changes of replica sets in etcd: a move marks the source leaving and
// adds the target with a new ID from the counter; a second change of the
// shard waits for the first; set-replicas places new replicas on the
// nodes with fewest; a removed replica is dropped from its set.
func TestReplicaSetChanges(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	k := Keys{Name: "chat"}
	c := srv.Client(t)
	m, _, err := EnsureReplicated(ctx, c, k, 2, 3, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := MoveReplica(ctx, c, k, 0, "a", "d"); !errors.Is(err, ErrNodeDown) {
		t.Fatalf("a move to an unregistered node: %v", err)
	}
	for _, name := range []string{"a", "d", "e"} {
		reg, err := Register(ctx, OwnerOptions{Client: c, Keys: k, Node: name, URL: "http://" + name, Owner: name + "/1", TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = reg.Release() })
	}
	moved, err := MoveReplica(ctx, c, k, 0, "a", "d")
	if err != nil {
		t.Fatal(err)
	}
	src, _ := moved.ReplicaOn(0, "a")
	dst, _ := moved.ReplicaOn(0, "d")
	if !src.Leaving || !dst.Added || dst.ID != 7 || moved.Homes[0] != moved.Desired(0)[0].Node || len(moved.Desired(0)) != 3 {
		t.Fatalf("after the move: %+v, homes %v", moved.Sets[0], moved.Homes)
	}
	if _, err := MoveReplica(ctx, c, k, 0, "b", "e"); !errors.Is(err, ErrMoveInProgress) {
		t.Fatalf("a second move while the first is under way: %v", err)
	}
	if _, err := MoveReplica(ctx, c, k, 1, "b", "a"); !errors.Is(err, ErrMembershipChange) {
		t.Fatalf("a move to a node holding a replica: %v", err)
	}
	if err := DropRemoved(ctx, c, k, 0, src.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := SetReplicas(ctx, c, k, 5, []string{"a", "b", "c", "d"}); !errors.Is(err, ErrReplicaCount) {
		t.Fatalf("5 replicas over 4 nodes: %v", err)
	}
	five, err := SetReplicas(ctx, c, k, 5, []string{"a", "b", "c", "d", "e"})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[uint64]bool{}
	for n := range five.Shards {
		if len(five.Desired(n)) != 5 {
			t.Fatalf("shard %d: %+v", n, five.Sets[n])
		}
		for _, r := range five.Sets[n] {
			if ids[r.ID] {
				t.Fatalf("replica ID %d given twice: %+v", r.ID, five.Sets)
			}
			ids[r.ID] = true
		}
	}
	if got, err := ReadMap(ctx, c, k); err != nil || fmt.Sprint(got.Sets) != fmt.Sprint(five.Sets) || got.Replicas != 5 {
		t.Fatalf("read back %+v, %v", got, err)
	}
	if _, ok, err := ReplaceReplica(ctx, c, k, 1, "a", []string{"b", "c", "d", "e"}); err != nil || ok {
		t.Fatalf("a replacement with no node free: %v %v", ok, err)
	}
	_ = m
}

// reconcileNode is one node: registered, running its replicas, publishing
// their leaderships, reconciling.
type reconcileNode struct {
	reg  *Registration
	host *replica.Host
	pub  *Leaders
	rec  *Reconciler
}

// testReplicated runs nodes over one Local network, each running the
// replicas the map names it for, applying its stores' commands, with a
// reconciler that joins replicas added to it.
type testReplicated struct {
	t     *testing.T
	srv   *etcdtest.Server
	k     Keys
	net   *replica.Local
	dir   string
	mu    sync.Mutex
	nodes map[string]*reconcileNode
	logs  lockedBuffer
}

// lockedBuffer is a buffer many loggers write to.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (tc *testReplicated) folder(node string, n int) string {
	return filepath.Join(tc.dir, node, fmt.Sprintf("shard%d", n))
}

func (tc *testReplicated) node(name string) *reconcileNode {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.nodes[name]
}

// open starts node name's replica r of shard n on h.
func (tc *testReplicated) open(ctx context.Context, h *replica.Host, name string, n int, r Replica, peers []uint64) error {
	open := func(dir string) (*store.Store, error) { return store.Open(dir, store.Options{}) }
	s, err := open(tc.folder(name, n))
	if err != nil {
		return err
	}
	if err := h.AddGroup(ctx, replica.GroupConfig{Group: uint64(n), Replica: r.ID, Peers: peers, Join: r.Added, Store: s,
		Folder: &replica.Folder{Dir: tc.folder(name, n), Open: open}}); err != nil {
		return errors.Join(err, s.Close())
	}
	tc.net.Attach(r.ID, h)
	return nil
}

func (tc *testReplicated) start(name string, deadAfter time.Duration) {
	t := tc.t
	ctx := context.Background()
	c := tc.srv.Client(t)
	m, err := ReadMap(ctx, c, tc.k)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := Register(ctx, OwnerOptions{Client: c, Keys: tc.k, Node: name, URL: "http://" + name, Owner: name + "/1", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pub := startLeaders(t, c, tc.k, name)
	// The membership steps, shown when the test fails.
	log := slog.New(slog.NewTextHandler(&tc.logs, nil)).With("node", name)
	h, err := replica.NewHost(replica.Config{Transport: tc.net, Tick: 10 * time.Millisecond, ElectionTicks: 50, Logger: log,
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
		if r, ok := m.ReplicaOn(n, name); ok {
			if err := tc.open(ctx, h, name, n, r, m.Voters(n)); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.Start(ctx)
	rec := NewReconciler(ReconcilerOptions{Client: c, Keys: tc.k, Host: h, Node: name, DeadAfter: deadAfter,
		Every: 200 * time.Millisecond, Logger: log,
		Join: func(ctx context.Context, n int, r Replica) error { return tc.open(ctx, h, name, n, r, nil) }})
	rec.Start(ctx)
	nd := &reconcileNode{reg: reg, host: h, pub: pub, rec: rec}
	tc.mu.Lock()
	tc.nodes[name] = nd
	tc.mu.Unlock()
	t.Cleanup(func() { tc.stop(name) })
}

// stop stops node name for good: unregistered, its replicas cut off.
func (tc *testReplicated) stop(name string) {
	tc.mu.Lock()
	nd := tc.nodes[name]
	delete(tc.nodes, name)
	tc.mu.Unlock()
	if nd == nil {
		return
	}
	nd.rec.Stop()
	nd.host.Stop()
	nd.pub.Stop()
	_ = nd.reg.Release()
	for _, st := range nd.host.Statuses() {
		tc.net.Cut(st.Replica)
	}
	for _, st := range nd.host.Statuses() {
		if s := nd.host.Store(st.Group); s != nil {
			_ = s.Close()
		}
	}
}

// settled waits until every shard's group is its set: no replica
// leaving, every replica of the set a voter on a running node, holding
// thread tid. (TestDeadNodesReplicasAreRecreated checks the status and
// gauge through serve's wiring.)
func (tc *testReplicated) settled(shards int, tid string) Map {
	tc.t.Helper()
	ctx := context.Background()
	c := tc.srv.Client(tc.t)
	var m Map
	why, said := "", ""
	defer func() {
		if tc.t.Failed() {
			tc.t.Logf("not settled: %s", why)
		}
	}()
	waitFor(tc.t, "every group to be its set, caught up", func() bool {
		if why != said {
			said = why
		}
		var err error
		if m, err = ReadMap(ctx, c, tc.k); err != nil {
			tc.t.Fatal(err)
		}
		for n := range shards {
			if len(m.Desired(n)) != len(m.Sets[n]) {
				why = fmt.Sprintf("shard %d: set %+v", n, m.Sets[n])
				return false
			}
			for _, r := range m.Sets[n] {
				nd := tc.node(r.Node)
				if nd == nil {
					why = fmt.Sprintf("shard %d: node %s stopped", n, r.Node)
					return false
				}
				voters, learners, err := nd.host.Members(uint64(n))
				if err != nil || len(learners) != 0 || len(voters) != len(m.Sets[n]) || !slices.Contains(voters, r.ID) {
					why = fmt.Sprintf("shard %d: node %s: voters %v learners %v %v", n, r.Node, voters, learners, err)
					return false
				}
				if s := nd.host.Store(uint64(n)); s == nil {
					why = fmt.Sprintf("shard %d: node %s has no store", n, r.Node)
					return false
				} else if _, err := s.GetThread(ctx, tid); err != nil {
					why = fmt.Sprintf("shard %d: node %s: %v", n, r.Node, err)
					return false
				}
			}
		}
		return true
	})
	return m
}

// A shard's replica moves to a fourth node (added as a learner, caught up
// by snapshot, promoted, the source removed and its folder deleted), and
// a node stopped for good has its replicas re-created on the nodes left,
// every shard back to three replicas with its data.
func TestReconcilerMovesAndReplacesReplicas(t *testing.T) {
	tc := &testReplicated{t: t, srv: etcdtest.Start(t), k: Keys{Name: "chat"}, net: replica.NewLocal(), dir: t.TempDir(),
		nodes: map[string]*reconcileNode{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(tc.logs.String())
		}
	})
	ctx := context.Background()
	c := tc.srv.Client(t)
	const shards = 2
	if _, _, err := EnsureReplicated(ctx, c, tc.k, shards, 3, []string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		tc.start(name, time.Second)
	}
	for n := range shards {
		waitFor(t, fmt.Sprintf("a serving leader of shard %d", n), func() bool {
			for _, name := range []string{"a", "b", "c"} {
				if nd := tc.node(name); nd.host.Lease(uint64(n)) != 0 {
					_, err := nd.host.Store(uint64(n)).CreateThread(ctx, store.Thread{ID: "t", Title: "t", Author: "ann"})
					return err == nil
				}
			}
			return false
		})
	}

	moved, err := MoveReplica(ctx, c, tc.k, 0, "a", "d")
	if err != nil {
		t.Fatal(err)
	}
	src, _ := moved.ReplicaOn(0, "a")
	m := tc.settled(shards, "t")
	if _, ok := m.ReplicaOn(0, "a"); ok {
		t.Fatalf("shard 0 still has a replica on a: %+v", m.Sets[0])
	}
	waitFor(t, "the moved replica's folder to go", func() bool {
		_, err := os.Stat(tc.folder("a", 0))
		return os.IsNotExist(err) && tc.node("a").host.Store(0) == nil
	})
	if _, ok := m.ReplicaOn(0, "d"); !ok || src.ID == 0 {
		t.Fatalf("shard 0 has no replica on d: %+v", m.Sets[0])
	}

	tc.stop("b")
	m = tc.settled(shards, "t")
	for n := range shards {
		if _, ok := m.ReplicaOn(n, "b"); ok || len(m.Sets[n]) != 3 {
			t.Fatalf("shard %d after node b died: %+v", n, m.Sets[n])
		}
	}
}
