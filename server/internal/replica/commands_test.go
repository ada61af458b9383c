package replica_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/replica/replicatest"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// newStoreCluster runs three nodes whose groups apply their stores'
// commands: the stores' writes are proposals.
func newStoreCluster(t *testing.T, groups ...uint64) *testCluster {
	return newCluster(t, nil, nil, groups...)
}

// servingLeader waits for a node, other than those in not, that leads g
// with a lease (it may evaluate writes) and returns its index.
func (c *testCluster) servingLeader(g uint64, not ...int) int {
	c.T.Helper()
	at := -1
	c.WaitFor(fmt.Sprintf("a serving leader of group %d", g), func() bool {
		for i, nd := range c.nodes {
			if nd != nil && !contains(not, i) && nd.host.Lease(g) != 0 {
				at = i
				return true
			}
		}
		return false
	})
	return at
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// caughtUp waits until every running replica of g applied what node l
// has applied.
func (c *testCluster) caughtUp(g uint64, l int) {
	c.T.Helper()
	want := c.raftLog(l, g).Applied()
	c.WaitFor(fmt.Sprintf("group %d's replicas to apply up to %d", g, want), func() bool {
		for i, nd := range c.nodes {
			if nd != nil && nd.store(g) != nil && c.raftLog(i, g).Applied() < want {
				return false
			}
		}
		return true
	})
}

func (c *testCluster) raftLog(i int, g uint64) *store.RaftLog {
	c.T.Helper()
	l, err := c.nodes[i].store(g).RaftLog(context.Background())
	if err != nil {
		c.T.Fatal(err)
	}
	return l
}

// keySpace is every key and value of s but the Raft log's and state's
// (raft:) and those that belong to the folder rather than the shard: its
// database ID (each replica's folder has its own until snapshots make
// them copies), its erase state (what its own files still hold), and its
// seal with the format raise it owes (each replica seals its own folder
// under its own key store when it opens it).
func keySpace(t *testing.T, s *store.Store) []string {
	t.Helper()
	it, err := s.DB().NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if bytes.HasPrefix(k, []byte("raft:")) || bytes.HasPrefix(k, []byte("sys:format:owed:")) ||
			string(k) == "sys:db:id" || string(k) == "sys:erased" || string(k) == "sys:seal" {
			continue
		}
		out = append(out, fmt.Sprintf("%q=%q", k, it.Value()))
	}
	return out
}

// sameEverywhere waits until every running replica of g applied what
// node l did and checks that their key spaces are the same, byte for
// byte.
func (c *testCluster) sameEverywhere(g uint64, l int) {
	c.T.Helper()
	c.caughtUp(g, l)
	want := keySpace(c.T, c.nodes[l].store(g))
	for i, nd := range c.nodes {
		if nd == nil || i == l || nd.store(g) == nil { // stopped, or removed from g
			continue
		}
		if got := keySpace(c.T, nd.store(g)); !reflect.DeepEqual(got, want) {
			c.T.Fatalf("replica %d's keys differ from the leader's:\n%q\n%q", i, got, want)
		}
	}
	if len(want) == 0 {
		c.T.Fatal("no keys")
	}
}

func body(text string) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"text":%q}`, text)) }

// must returns v, and panics (failing the test with its stack) on err:
// for calls in a test's own goroutine.
func must[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprintf("unexpected error: %v", err))
	}
	return v
}

// page is must for a page of a listing.
func page[T any](v []T, _ string, err error) []T { return must(v, err) }

// Writes through the leader's store (threads, messages, edits, deletes,
// titles, holds, overrides, a keyed request) are applied by every
// replica: the replicas' databases hold the same keys and values, and a
// follower's store reads exactly as the leader's.
func TestStoreWritesReadTheSameOnEveryReplica(t *testing.T) {
	c := newStoreCluster(t, 7)
	const g = 7
	ctx := context.Background()
	l := c.servingLeader(g)
	s := c.nodes[l].store(g)
	th := must(s.CreateThread(ctx, store.Thread{Title: "plans", Author: "ann"}))
	held := must(s.CreateThread(ctx, store.Thread{ID: "held", Title: "kept", Author: "bob"}))
	gone := must(s.CreateThread(ctx, store.Thread{ID: "gone", Title: "old", Author: "bob"}))
	var mids []string
	for k := range 6 {
		m := must(s.AppendMessage(ctx, th.ID, store.Message{Author: "ann", Body: body(fmt.Sprint("m", k))}))
		mids = append(mids, m.ID)
	}
	must(s.EditMessage(ctx, th.ID, mids[0], body("edited")))
	must(s.DeleteMessage(ctx, th.ID, mids[1]))
	must(s.DeleteMessage(ctx, th.ID, mids[2]))
	must(s.RestoreMessage(ctx, th.ID, mids[2]))
	must(s.SetTitle(ctx, held.ID, "renamed"))
	must(s.SetLegalHold(ctx, held.ID, true))
	must(s.DeleteThread(ctx, gone.ID))
	keep := 3
	if err := s.SetRetentionOverride(ctx, th.ID, store.RetentionOverride{MaxMessages: &keep}); err != nil {
		t.Fatal(err)
	}
	idem := &store.Idempotent{Scope: "a1", Key: "b2", Fingerprint: "f", Status: 201}
	keyed := must(s.AppendMessage(store.WithIdempotent(ctx, idem), th.ID, store.Message{Author: "ann", Body: body("keyed")}))
	c.sameEverywhere(g, l)

	want := page(s.ListMessages(ctx, th.ID, store.ListOptions{IncludeDeleted: true}))
	wantThreads := page(s.ListThreads(ctx, store.ListOptions{IncludeDeleted: true}))
	for i, nd := range c.nodes {
		f := nd.store(g)
		if got := page(f.ListMessages(ctx, th.ID, store.ListOptions{IncludeDeleted: true})); !reflect.DeepEqual(got, want) {
			t.Errorf("replica %d lists %+v, the leader %+v", i, got, want)
		}
		if got := page(f.ListThreads(ctx, store.ListOptions{IncludeDeleted: true})); !reflect.DeepEqual(got, wantThreads) {
			t.Errorf("replica %d lists threads %+v, the leader %+v", i, got, wantThreads)
		}
		r, found, err := f.Remember(ctx, idem.Scope, idem.Key, 0)
		if err != nil || !found || r.Message == nil || r.Message.ID != keyed.ID {
			t.Errorf("replica %d remembers the keyed request as %+v, %v, %v", i, r, found, err)
		}
	}
	if len(want) != 7 || !want[1].Deleted || want[0].Version != 2 {
		t.Fatalf("the leader lists %+v", want)
	}
}

// A follower's store refuses a write with ErrNotLeader and proposes
// nothing: the write exists on no replica, while the leader's go on.
func TestFollowerRefusesWrites(t *testing.T) {
	c := newStoreCluster(t, 8)
	const g = 8
	ctx := context.Background()
	l := c.servingLeader(g)
	f := (l + 1) % 3
	_, err := c.nodes[f].store(g).CreateThread(ctx, store.Thread{ID: "refused", Title: "t", Author: "a"})
	if !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("a follower's write: %v, want ErrNotLeader", err)
	}
	must(c.nodes[l].store(g).CreateThread(ctx, store.Thread{ID: "accepted", Title: "t", Author: "a"}))
	c.sameEverywhere(g, l)
	for i, nd := range c.nodes {
		if _, err := nd.store(g).GetThread(ctx, "refused"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("replica %d reads the refused thread: %v", i, err)
		}
	}
}

// countBodies counts the messages of tid whose body is b.
func countBodies(t *testing.T, s *store.Store, tid string, b json.RawMessage) int {
	t.Helper()
	n := 0
	for _, m := range page(s.ListMessages(context.Background(), tid, store.ListOptions{Limit: store.MaxListLimit})) {
		if bytes.Equal(m.Body, b) {
			n++
		}
	}
	return n
}

// A leader cut off while a write is in flight cannot acknowledge it. Cut
// off both ways, its entry reaches nobody: the write is applied by no
// replica. Deaf (its appends reach the followers, their answers are
// lost), its entry is in the majority's logs: the next leader commits
// it, and every replica applies it once, never twice, though its
// proposer answered ErrAmbiguous; the client's retry with its
// Idempotency-Key finds the answer on the new leader.
func TestCutOffLeaderWriteAppliesAtMostOnce(t *testing.T) {
	for _, deaf := range []bool{false, true} {
		t.Run(fmt.Sprintf("deaf=%v", deaf), func(t *testing.T) {
			c := newStoreCluster(t, 9)
			const g = 9
			ctx := context.Background()
			l := c.servingLeader(g)
			th := must(c.nodes[l].store(g).CreateThread(ctx, store.Thread{ID: "t", Title: "t", Author: "a"}))
			c.caughtUp(g, l)
			if deaf {
				c.net.Deafen(replicatest.ID(g, l))
			} else {
				c.net.Cut(replicatest.ID(g, l))
			}
			idem := &store.Idempotent{Scope: "c1", Key: "d2", Fingerprint: "f", Status: 201}
			wctx, cancel := context.WithTimeout(store.WithIdempotent(ctx, idem), 30*time.Second)
			_, err := c.nodes[l].store(g).AppendMessage(wctx, th.ID, store.Message{Author: "a", Body: body("in flight")})
			cancel()
			if err == nil {
				t.Fatal("a leader cut off from its peers acknowledged a write")
			}
			next := c.servingLeader(g, l)
			must(c.nodes[next].store(g).AppendMessage(ctx, th.ID, store.Message{Author: "a", Body: body("after")}))
			c.net.Heal(replicatest.ID(g, l))
			c.sameEverywhere(g, next)
			t.Logf("the cut-off leader's write: %v", err)
			want := 0
			if deaf && errors.Is(err, store.ErrAmbiguous) {
				want = 1
			}
			for i, nd := range c.nodes {
				if n := countBodies(t, nd.store(g), th.ID, body("in flight")); n != want {
					t.Errorf("replica %d holds the write %d times, want %d (its proposer answered %v)", i, n, want, err)
				}
				if n := countBodies(t, nd.store(g), th.ID, body("after")); n != 1 {
					t.Errorf("replica %d holds the new leader's write %d times", i, n)
				}
			}
			_, found, rerr := c.nodes[next].store(g).Remember(ctx, idem.Scope, idem.Key, 0)
			if rerr != nil || found != (want == 1) {
				t.Errorf("the new leader remembers the key: %v, %v (applied %d times)", found, rerr, want)
			}
		})
	}
}

// Writers racing on one thread and on many keep read-check-write: the
// versions of a message edited concurrently run 1..n with no gap and no
// repeat, every append lands once, and every replica holds the same.
func TestConcurrentWritersKeepReadCheckWrite(t *testing.T) {
	c := newStoreCluster(t, 11)
	const g = 11
	ctx := context.Background()
	l := c.servingLeader(g)
	s := c.nodes[l].store(g)
	one := must(s.CreateThread(ctx, store.Thread{ID: "one", Title: "t", Author: "a"}))
	m0 := must(s.AppendMessage(ctx, one.ID, store.Message{Author: "a", Body: body("v1")}))
	const writers, each = 4, 8
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for k := range each {
				if _, err := s.EditMessage(ctx, one.ID, m0.ID, body(fmt.Sprintf("w%d k%d", w, k))); err != nil {
					t.Error(err)
				}
				if _, err := s.AppendMessage(ctx, one.ID, store.Message{Author: "a", Body: body(fmt.Sprintf("w%d k%d", w, k))}); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Go(func() {
			tid := fmt.Sprint("own", w)
			if _, err := s.CreateThread(ctx, store.Thread{ID: tid, Title: "t", Author: "a"}); err != nil {
				t.Error(err)
				return
			}
			for k := range each {
				if _, err := s.AppendMessage(ctx, tid, store.Message{Author: "a", Body: body(fmt.Sprint(k))}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	c.sameEverywhere(g, l)
	for i, nd := range c.nodes {
		vs := must(nd.store(g).ListVersions(ctx, one.ID, m0.ID))
		if len(vs) != 1+writers*each {
			t.Fatalf("replica %d: %d versions, want %d", i, len(vs), 1+writers*each)
		}
		for k, v := range vs {
			if v.Version != int64(k+1) {
				t.Fatalf("replica %d: version %d at position %d", i, v.Version, k)
			}
		}
		if n := len(page(nd.store(g).ListMessages(ctx, one.ID, store.ListOptions{Limit: store.MaxListLimit}))); n != 1+writers*each {
			t.Fatalf("replica %d: %d messages in the shared thread, want %d", i, n, 1+writers*each)
		}
		for w := range writers {
			if n := len(page(nd.store(g).ListMessages(ctx, fmt.Sprint("own", w), store.ListOptions{}))); n != each {
				t.Fatalf("replica %d: %d messages in thread own%d", i, n, w)
			}
		}
	}
}
