package replica_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/replica/replicatest"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// countMessages is the number of live messages of tid in s.
func countMessages(t *testing.T, s *store.Store, tid string) int {
	t.Helper()
	return len(page(s.ListMessages(context.Background(), tid, store.ListOptions{Limit: store.MaxListLimit})))
}

// A read after ReadIndex sees every write acknowledged before it: on the
// leader, and on the next leader once the first one's node stopped,
// though that replica may not have known the last writes committed when
// it was elected. Followers refuse. Readers on every live node ask at
// once, so reads share raft's requests and race the election.
func TestReadIndexSeesAcknowledgedWrites(t *testing.T) {
	c := newStoreCluster(t, 12)
	const g = 12
	ctx := context.Background()
	l := c.servingLeader(g)
	s := c.nodes[l].store(g)
	th := must(s.CreateThread(ctx, store.Thread{ID: "t", Title: "t", Author: "a"}))
	const n = 20
	for k := range n {
		must(s.AppendMessage(ctx, th.ID, store.Message{Author: "a", Body: body(fmt.Sprint(k))}))
	}
	if err := c.nodes[l].host.ReadIndex(ctx, g); err != nil {
		t.Fatalf("the leader's read: %v", err)
	}
	if got := countMessages(t, s, th.ID); got != n {
		t.Fatalf("the leader reads %d messages, want %d", got, n)
	}
	for i, nd := range c.nodes {
		if i != l {
			if err := nd.host.ReadIndex(ctx, g); !errors.Is(err, store.ErrNotLeader) {
				t.Fatalf("follower %d's read: %v, want ErrNotLeader", i, err)
			}
		}
	}

	c.stop(l)
	var served atomic.Int32
	var wg sync.WaitGroup
	for i, nd := range c.nodes {
		if nd == nil {
			continue
		}
		for range 4 {
			wg.Go(func() {
				deadline := time.Now().Add(60 * time.Second)
				for served.Load() == 0 && time.Now().Before(deadline) {
					err := nd.host.ReadIndex(ctx, g)
					if errors.Is(err, store.ErrNotLeader) {
						time.Sleep(2 * time.Millisecond)
						continue
					}
					if err != nil {
						t.Errorf("node %d's read: %v", i, err)
						return
					}
					if got := countMessages(t, nd.store(g), th.ID); got != n {
						t.Errorf("node %d read %d messages after ReadIndex, want %d", i, got, n)
					}
					served.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if served.Load() == 0 {
		t.Fatal("no live node served a read")
	}
}

// A leader cut off from its peers never completes a ReadIndex: the read
// asked after the cut fails with ErrNotLeader once it steps down, while
// the majority elects another leader and commits a write the cut-off
// replica never saw (a read served there would have been stale). Reads
// asked of it while it is cut off fail, and after the cut heals the new
// leader serves the write.
func TestCutOffLeaderServesNoRead(t *testing.T) {
	c := newStoreCluster(t, 13)
	const g = 13
	ctx := context.Background()
	l := c.servingLeader(g)
	must(c.nodes[l].store(g).CreateThread(ctx, store.Thread{ID: "before", Title: "t", Author: "a"}))
	c.caughtUp(g, l)
	c.net.Cut(replicatest.ID(g, l))
	read := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		read <- c.nodes[l].host.ReadIndex(rctx, g)
	}()
	next := c.servingLeader(g, l)
	must(c.nodes[next].store(g).CreateThread(ctx, store.Thread{ID: "after", Title: "t", Author: "a"}))
	if err := <-read; !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("the cut-off leader's read: %v, want ErrNotLeader", err)
	}
	if _, err := c.nodes[l].store(g).GetThread(ctx, "after"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the cut-off replica reads the majority's write: %v", err)
	}
	if err := c.nodes[l].host.ReadIndex(ctx, g); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("a read asked of the cut-off replica: %v, want ErrNotLeader", err)
	}
	c.net.Heal(replicatest.ID(g, l))
	if err := c.nodes[next].host.ReadIndex(ctx, g); err != nil {
		t.Fatalf("the new leader's read: %v", err)
	}
	must(c.nodes[next].store(g).GetThread(ctx, "after"))
}

// A read whose context ends first answers the context's error; a read of
// a group the host does not run, ErrNoGroup.
func TestReadIndexEndsWithItsContext(t *testing.T) {
	c := newStoreCluster(t, 14)
	const g = 14
	l := c.servingLeader(g)
	c.net.Cut(replicatest.ID(g, l))
	defer c.net.Heal(replicatest.ID(g, l))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := c.nodes[l].host.ReadIndex(ctx, g)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a read of a cut-off leader with a short deadline: %v", err)
	}
	if err := c.nodes[l].host.ReadIndex(context.Background(), g+1); !errors.Is(err, replica.ErrNoGroup) {
		t.Fatalf("a read of a group the host does not run: %v", err)
	}
}
