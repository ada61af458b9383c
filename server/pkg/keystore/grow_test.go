package keystore_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"gocloud.dev/secrets"

	"github.com/progressdb/progressdb/server/pkg/keystore"
)

// openWith opens the key store at dir with the group's secret (nil for
// none), as a node does.
func openWith(t *testing.T, dir string, k *secrets.Keeper, secret []byte) *keystore.KeyStore {
	t.Helper()
	ks, err := keystore.Open(context.Background(), dir, keystore.Options{Keeper: k, GroupSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ks.Close() })
	return ks
}

// authorKeys lists the author's keys, sorted.
func authorKeys(t *testing.T, ks *keystore.KeyStore, author string) []keystore.KeyRef {
	t.Helper()
	refs, err := ks.AuthorKeys(context.Background(), author)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(refs, func(a, b keystore.KeyRef) int {
		if a.Thread != b.Thread {
			return bytes.Compare([]byte(a.Thread), []byte(b.Thread))
		}
		return int(a.Number) - int(b.Number)
	})
	return refs
}

// A shard grown from one copy into a group keeps its key store's author
// index: opened again with the group's secret (the node started after
// set-replicas), joined to the group while open (the switch), or closed
// at any point in between, it finds every author's keys; JoinGroup
// writes nothing, so no crash leaves half an index. A follower given a
// copy of the store (its snapshot) finds the same keys, applies the
// leader's ops, and, leading next, reuses an author's key and destroys
// every key of the author through the index.
func TestGrownKeyStoreKeepsItsAuthorIndex(t *testing.T) {
	ctx := context.Background()
	k := keeper(t, 7)
	secret := bytes.Repeat([]byte{5}, keystore.GroupSecretSize)
	root := t.TempDir()
	home := filepath.Join(root, "home")

	owned := openWith(t, home, k, nil)
	annT1, sealedT1 := seal(t, owned, "t1", "ann", "hello")
	seal(t, owned, "t2", "ann", "again")
	seal(t, owned, "t1", "bob", "hi")
	want := authorKeys(t, owned, "ann")
	if len(want) != 2 {
		t.Fatalf("ann's keys before: %v", want)
	}
	if err := owned.Close(); err != nil {
		t.Fatal(err)
	}

	// Started again once the map asks for replicas, before its switch.
	reopened := openWith(t, home, k, secret)
	if got := authorKeys(t, reopened, "ann"); !slices.Equal(got, want) {
		t.Fatalf("opened with the group's secret, ann's keys are %v, want %v", got, want)
	}
	if num, _, err := reopened.Key(ctx, "t1", "ann"); err != nil || num != annT1 {
		t.Fatalf("ann's key of t1 is %d (%v), want %d", num, err, annT1)
	}
	if err := reopened.Close(); err != nil {
		t.Fatal(err)
	}

	// The switch: the store opened owned joins the group.
	leader := openWith(t, home, k, nil)
	if err := leader.JoinGroup(secret); err != nil {
		t.Fatal(err)
	}
	if err := leader.JoinGroup(secret); err != nil {
		t.Fatalf("joined again with the same secret: %v", err)
	}
	if err := leader.JoinGroup(bytes.Repeat([]byte{6}, keystore.GroupSecretSize)); !errors.Is(err, keystore.ErrReplicated) {
		t.Fatalf("joined with another group's secret: %v", err)
	}
	if got := authorKeys(t, leader, "ann"); !slices.Equal(got, want) {
		t.Fatalf("joined, ann's keys are %v, want %v", got, want)
	}

	// The follower's first snapshot carries the store as it is.
	cp, err := leader.Checkpoint(ctx, "snap")
	if err != nil {
		t.Fatal(err)
	}
	follower := filepath.Join(root, "follower")
	if err := os.Rename(cp, follower); err != nil {
		t.Fatal(err)
	}
	f := openWith(t, follower, k, secret)
	if got := authorKeys(t, f, "ann"); !slices.Equal(got, want) {
		t.Fatalf("the follower finds ann's keys %v, want %v", got, want)
	}
	if !opens(t, f, "t1", annT1, sealedT1) {
		t.Fatal("the follower does not open what ann sealed")
	}

	l := &opLog{replicas: []*keystore.KeyStore{leader, f}}
	if err := leader.Replicate(l.propose); err != nil {
		t.Fatal(err)
	}
	annT3, _ := seal(t, leader, "t3", "ann", "third")
	if len(l.ops) != 1 {
		t.Fatalf("%d ops for one new key", len(l.ops))
	}
	want = authorKeys(t, leader, "ann")
	if got := authorKeys(t, f, "ann"); len(want) != 3 || !slices.Equal(got, want) {
		t.Fatalf("after the op, the follower finds ann's keys %v, the leader %v", got, want)
	}

	// The follower leads: ann's keys are found by her name.
	if err := leader.Replicate(nil); err != nil {
		t.Fatal(err)
	}
	if err := f.Replicate(l.propose); err != nil {
		t.Fatal(err)
	}
	for tid, num := range map[string]uint32{"t1": annT1, "t3": annT3} {
		if got, _, err := f.Key(ctx, tid, "ann"); err != nil || got != num {
			t.Fatalf("leading, the follower gives ann key %d of %s (%v), want %d", got, tid, err, num)
		}
	}
	if len(l.ops) != 1 {
		t.Fatalf("ann's existing keys made %d ops", len(l.ops)-1)
	}
	destroyed, _, err := f.DestroyAuthor(ctx, "ann", nil)
	if err != nil || len(destroyed) != 3 {
		t.Fatalf("destroy ann through the follower: %v (%v)", destroyed, err)
	}
	for i, ks := range []*keystore.KeyStore{leader, f} {
		if got := authorKeys(t, ks, "ann"); len(got) != 0 {
			t.Fatalf("replica %d still finds ann's keys %v", i, got)
		}
		if opens(t, ks, "t1", annT1, sealedT1) {
			t.Fatalf("replica %d still opens what ann sealed", i)
		}
		if got := authorKeys(t, ks, "bob"); len(got) != 1 {
			t.Fatalf("replica %d finds bob's keys %v", i, got)
		}
	}
}

// A store made for a group keys its index with the group's key and
// keeps it wrapped like its own: opened later without the secret (a
// command of the node), it still finds its authors.
func TestGroupStoreFindsAuthorsWithoutTheSecret(t *testing.T) {
	k := keeper(t, 7)
	dir := filepath.Join(t.TempDir(), "ks")
	secret := bytes.Repeat([]byte{5}, keystore.GroupSecretSize)
	ks := openWith(t, dir, k, secret)
	if err := ks.Replicate(func(ctx context.Context, op []byte, _ bool) error { return ks.ApplyOp(ctx, op) }); err != nil {
		t.Fatal(err)
	}
	num, _ := seal(t, ks, "t1", "ann", "hello")
	if err := ks.Close(); err != nil {
		t.Fatal(err)
	}
	plain := openWith(t, dir, k, nil)
	if got := authorKeys(t, plain, "ann"); len(got) != 1 || got[0].Number != num {
		t.Fatalf("opened without the secret, ann's keys are %v", got)
	}
}
