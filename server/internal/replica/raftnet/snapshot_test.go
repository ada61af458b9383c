package raftnet_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// servingLeader waits for a node that leads g with a lease.
func (c *netCluster) servingLeader(g uint64) int {
	c.T.Helper()
	at := -1
	c.WaitFor(fmt.Sprintf("a serving leader of group %d", g), func() bool {
		for i, nd := range c.nodes {
			if nd != nil && nd.host.Lease(g) != 0 {
				at = i
				return true
			}
		}
		return false
	})
	return at
}

func (c *netCluster) applied(i int, g uint64) uint64 {
	c.T.Helper()
	l, err := c.nodes[i].host.Store(g).RaftLog(context.Background())
	if err != nil {
		c.T.Fatal(err)
	}
	return l.Applied()
}

// A replica stopped while the others write past what the leader's log
// keeps catches up over the network by a snapshot (the snapshot route,
// through the node routes' guard and the proxies): its database becomes
// a copy of the leader's, with every message.
func TestNetworkStoppedReplicaCatchesUpBySnapshot(t *testing.T) {
	t.Parallel()
	c := newNetClusterKeeping(t, 5, 3)
	const g = 3
	ctx := context.Background()
	l := c.servingLeader(g)
	s := c.nodes[l].host.Store(g)
	if _, err := s.CreateThread(ctx, store.Thread{ID: "t", Title: "t", Author: "ann"}); err != nil {
		t.Fatal(err)
	}
	f := (l + 1) % 3
	c.WaitFor("the follower to apply the thread", func() bool { return c.applied(f, g) >= c.applied(l, g) })
	had := c.applied(f, g)
	before, _ := c.nodes[f].host.Store(g).DatabaseID(ctx, false)
	c.stop(f)
	for k := range 40 {
		if _, err := s.AppendMessage(ctx, "t", store.Message{Author: "ann", Body: []byte(fmt.Sprintf(`{"k":%d}`, k))}); err != nil {
			t.Fatal(err)
		}
	}
	log, err := s.RaftLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first, _ := log.FirstIndex(); first <= had+1 {
		t.Fatalf("the leader's log starts at %d: the stopped replica, at %d, can catch up from it", first, had)
	}
	// Appends queued for the stopped node while the log still held
	// them would catch it up from the log: once the leader's queue for
	// it was dropped (a stream that cannot be opened), raft's next tries
	// find the entries gone.
	const dropped = "progressdb_replica_messages_dropped_total"
	was := c.counter(l, dropped, "reason", "unreachable")
	c.WaitFor("the leader to drop its queue for the stopped node", func() bool {
		return c.counter(l, dropped, "reason", "unreachable") > was
	})
	c.start(f, nil)
	c.WaitFor("the follower to catch up", func() bool { return c.applied(f, g) >= c.applied(l, g) })
	fs := c.nodes[f].host.Store(g)
	got, _, err := fs.ListMessages(ctx, "t", store.ListOptions{Limit: 100})
	if err != nil || len(got) != 40 {
		t.Fatalf("the follower lists %d messages, %v; want 40", len(got), err)
	}
	// The snapshot's sender led then: the database is a copy of its.
	id, _ := fs.DatabaseID(ctx, false)
	var others []string
	for i, nd := range c.nodes {
		if i != f {
			o, _ := nd.host.Store(g).DatabaseID(ctx, false)
			others = append(others, o)
		}
	}
	if id == before || !slices.Contains(others, id) {
		t.Fatalf("the follower's database is %s (before %s), the others' %q: not caught up by snapshot", id, before, others)
	}
	if strings.Contains(c.logs.String(), "raft_snapshot_not_taken") {
		t.Logf("a snapshot was refused before one was taken:\n%s", c.logs)
	}
	var _ replica.SnapshotSender = c.nodes[l].tr
}
