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
