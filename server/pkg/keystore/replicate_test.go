package keystore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/erase"
	"github.com/progressdb/progressdb/server/pkg/keystore"
)

// opLog is a group's log as the key stores see it: every op proposed is
// appended, then applied by every replica in log order.
type opLog struct {
	mu       sync.Mutex
	ops      [][]byte
	destroys []bool
	replicas []*keystore.KeyStore
}

func (l *opLog) propose(ctx context.Context, op []byte, destroys bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = append(l.ops, op)
	l.destroys = append(l.destroys, destroys)
	for _, ks := range l.replicas {
		if err := ks.ApplyOp(ctx, op); err != nil {
			return err
		}
	}
	return nil
}

// replicas opens n key stores of one group over one log; the first
// proposes.
func replicas(t *testing.T, n int, secret []byte) ([]*keystore.KeyStore, *opLog) {
	t.Helper()
	k := keeper(t, 7)
	l := &opLog{}
	for i := range n {
		dir := filepath.Join(t.TempDir(), fmt.Sprint("ks", i))
		ks, err := keystore.Open(context.Background(), dir, keystore.Options{Keeper: k, GroupSecret: secret})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ks.Close() })
		l.replicas = append(l.replicas, ks)
	}
	if err := l.replicas[0].Replicate(l.propose); err != nil {
		t.Fatal(err)
	}
	return l.replicas, l
}

// Every change made through the leader's key store is an op every
// replica applies: a key the leader created opens on each, an author's
// keys are found on each (the index key comes from the group's secret),
// destroys and erasure records reach each, and ops applied again in
// order (a replica killed between an op and its batch) change nothing.
func TestReplicatedKeyStoresHoldTheSameKeys(t *testing.T) {
	ctx := context.Background()
	secret := bytes.Repeat([]byte{3}, keystore.GroupSecretSize)
	rs, l := replicas(t, 3, secret)
	leader := rs[0]

	sealed := map[string][]byte{}
	nums := map[string]uint32{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, author := range []string{"ann", "bob", "cy"} {
		for _, tid := range []string{"t1", "t2"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				num, a, err := leader.Key(ctx, tid, author)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				nums[tid+author] = num
				sealed[tid+author] = a.Seal(nil, nil, []byte("body of "+author), []byte(tid))
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	seen := map[string]bool{}
	for k, num := range nums {
		key := fmt.Sprint(k[:2], num)
		if seen[key] {
			t.Fatalf("two authors got key %d of thread %s", num, k[:2])
		}
		seen[key] = true
		for i, ks := range rs {
			if !opens(t, ks, k[:2], num, sealed[k]) {
				t.Fatalf("replica %d does not open %s's key %d", i, k, num)
			}
		}
	}
	if n := len(l.ops); n != 6 {
		t.Fatalf("%d ops for 6 keys", n)
	}
	for i, ks := range rs {
		refs, err := ks.AuthorKeys(ctx, "ann")
		if err != nil || len(refs) != 2 {
			t.Fatalf("replica %d finds ann's keys %v (%v)", i, refs, err)
		}
		if _, _, err := ks.Key(ctx, "t1", "ann"); err != nil && i == 0 {
			t.Fatal(err)
		}
	}
	if n := len(l.ops); n != 6 {
		t.Fatalf("a key that exists made an op: %d ops", n)
	}

	if err := leader.PutErasure(ctx, "e1", "bob"); err != nil {
		t.Fatal(err)
	}
	if n, err := leader.DestroyThread(ctx, "t2"); err != nil || n != 3 {
		t.Fatalf("destroy thread t2: %d (%v)", n, err)
	}
	destroyed, _, err := leader.DestroyAuthor(ctx, "bob", nil)
	if err != nil || len(destroyed) != 1 || destroyed[0].Thread != "t1" {
		t.Fatalf("destroy bob: %v (%v)", destroyed, err)
	}
	if gone, err := leader.DestroyKey(ctx, keystore.KeyRef{Thread: "t1", Number: nums["t1cy"]}); err != nil || !gone {
		t.Fatalf("destroy cy's key: %v (%v)", gone, err)
	}
	if err := leader.CompleteErasure(ctx, "e1"); err != nil {
		t.Fatal(err)
	}
	if got := l.destroys[len(l.destroys)-4:]; got[0] != true || got[1] != true || got[2] != true || got[3] != true {
		t.Fatalf("destroys proposed as %v, want each a destroy", got)
	}

	want := state(t, rs[0])
	for i, ks := range rs[1:] {
		if got := state(t, ks); got != want {
			t.Fatalf("replica %d holds\n%s\nthe leader\n%s", i+1, got, want)
		}
	}
	// Every op applied again from each point, in order, to a replica
	// ahead of it: the same state.
	for from := range l.ops {
		for _, op := range l.ops[from:] {
			if err := rs[2].ApplyOp(ctx, op); err != nil {
				t.Fatal(err)
			}
		}
		if got := state(t, rs[2]); got != want {
			t.Fatalf("after re-applying ops from %d:\n%s\nwant\n%s", from, got, want)
		}
	}
	if !opens(t, rs[1], "t1", nums["t1ann"], sealed["t1ann"]) || opens(t, rs[1], "t2", nums["t2ann"], sealed["t2ann"]) {
		t.Fatal("after the destroys, ann's key of t1 should open and of t2 not")
	}
	for i, ks := range rs {
		if _, err := ks.Erase(ctx, erase.Options{}); err != nil {
			t.Fatal(err)
		}
		if ok, err := ks.Erased(ctx); err != nil || !ok {
			t.Fatalf("replica %d erased %v (%v)", i, ok, err)
		}
	}

	// Another group's secret opens no op; a store without one refuses.
	other, _ := replicas(t, 1, bytes.Repeat([]byte{4}, keystore.GroupSecretSize))
	if err := other[0].ApplyOp(ctx, l.ops[0]); err == nil {
		t.Fatal("an op applied under another group's secret")
	}
	plain := open(t, filepath.Join(t.TempDir(), "plain"), keeper(t, 7))
	if err := plain.ApplyOp(ctx, l.ops[0]); !errors.Is(err, keystore.ErrReplicated) {
		t.Fatalf("an op on a store without a group secret: %v", err)
	}
	if err := plain.Replicate(l.propose); !errors.Is(err, keystore.ErrReplicated) {
		t.Fatalf("Replicate without a group secret: %v", err)
	}
}

// state lists what a key store holds, for comparison across replicas.
func state(t *testing.T, ks *keystore.KeyStore) string {
	t.Helper()
	ctx := context.Background()
	var b bytes.Buffer
	for _, author := range []string{"ann", "bob", "cy"} {
		refs, err := ks.AuthorKeys(ctx, author)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(&b, author, refs)
	}
	pending, err := ks.PendingErasures(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(&b, "erasures", pending)
	return b.String()
}
