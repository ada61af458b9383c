package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/replica"
)

// The next membership step, from a set and a leader's view of its group.
func TestNextStep(t *testing.T) {
	caught := func(id uint64) replica.PeerStatus {
		return replica.PeerStatus{Replica: id, Match: 100, Active: true}
	}
	behind := replica.PeerStatus{Replica: 4, Match: 10, Lag: PromoteLag + 1, Active: true}
	move := []Replica{{ID: 1, Node: "a", Leaving: true}, {ID: 2, Node: "b"}, {ID: 3, Node: "c"}, {ID: 4, Node: "d", Added: true}}
	lost := []Replica{{ID: 1, Node: "a"}, {ID: 2, Node: "b"}, {ID: 3, Node: "c", Leaving: true}, {ID: 8, Node: "c", Added: true}}
	cancelled := []Replica{{ID: 1, Node: "a"}, {ID: 2, Node: "b"}, {ID: 3, Node: "c"}, {ID: 4, Node: "d", Added: true, Leaving: true}}
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
		// A lost folder: replica 3 of node c replaced by 8 on node c.
		{"a lost replica's replacement is added", 1, lost, []uint64{1, 2, 3}, nil, nil, memberStep{stepAddLearner, 8}},
		{"then promoted once caught up", 1, lost, []uint64{1, 2, 3}, []uint64{8}, []replica.PeerStatus{caught(8)}, memberStep{stepPromote, 8}},
		{"then the lost one is removed", 1, lost, []uint64{1, 2, 3, 8}, nil, nil, memberStep{stepRemove, 3}},
		// A move to a node that died, cancelled: its learner goes.
		{"a cancelled move's learner is removed", 2, cancelled, []uint64{1, 2, 3}, []uint64{4}, nil, memberStep{stepRemove, 4}},
		{"then dropped from the set", 2, cancelled, []uint64{1, 2, 3}, nil, nil, memberStep{stepDrop, 4}},
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

// A move whose target died before its replica became a voter is
// cancelled: the target's replica leaves and the source stays, only
// while the source is still a voter of the group; the cancelled replica
// is then dropped like any removed one, its start mark with it.
func TestCancelledMove(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	k := Keys{Name: "chat"}
	c := srv.Client(t)
	if _, _, err := EnsureReplicated(ctx, c, k, 1, 3, []string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	reg, err := Register(ctx, OwnerOptions{Client: c, Keys: k, Node: "d", URL: "http://d", Owner: "d/1", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Release() })
	moved, err := MoveReplica(ctx, c, k, 0, "a", "d")
	if err != nil {
		t.Fatal(err)
	}
	src, _ := moved.ReplicaOn(0, "a")
	dst, _ := moved.ReplicaOn(0, "d")
	if _, err := c.Put(ctx, k.ReplicaStarted(dst.ID), "d"); err != nil {
		t.Fatal(err)
	}
	// The source was removed already: nothing to fall back on.
	if _, ok, err := CancelAdded(ctx, c, k, 0, dst.ID, []uint64{moved.Sets[0][1].ID, moved.Sets[0][2].ID}); err != nil || ok {
		t.Fatalf("a cancel with the source no voter: %v %v", ok, err)
	}
	if _, ok, err := CancelAdded(ctx, c, k, 0, src.ID, []uint64{src.ID}); err != nil || ok {
		t.Fatalf("a cancel of a replica not added: %v %v", ok, err)
	}
	voters := []uint64{src.ID, moved.Sets[0][1].ID, moved.Sets[0][2].ID}
	back, ok, err := CancelAdded(ctx, c, k, 0, dst.ID, voters)
	if err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if r, _ := back.ReplicaOn(0, "a"); r.ID != src.ID || r.Leaving || back.Homes[0] != "a" {
		t.Fatalf("the source after the cancel: %+v, home %s", back.Sets[0], back.Homes[0])
	}
	if r, _ := back.ReplicaOn(0, "d"); r.ID != dst.ID || !r.Leaving {
		t.Fatalf("the target after the cancel: %+v", back.Sets[0])
	}
	if err := DropRemoved(ctx, c, k, 0, dst.ID); err != nil {
		t.Fatal(err)
	}
	m, err := ReadMap(ctx, c, k)
	if err != nil || fmt.Sprint(m.Sets[0]) != fmt.Sprint(back.Desired(0)) {
		t.Fatalf("the set after the drop: %+v %v", m.Sets, err)
	}
	if resp, err := c.Get(ctx, k.ReplicaStarted(dst.ID)); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the dropped replica's start mark: %v %v", resp, err)
	}
}
