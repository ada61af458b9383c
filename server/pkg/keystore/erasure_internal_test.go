package keystore

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/erase"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// A pending erasure keeps its author sealed under the receipt key: never
// in clear in a file, back after a reopen, bound to its ID; completed and
// erased, its sealed value is in no file either.
func TestErasureEntry(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "keys")
	k := testKeeper(t, 1)
	ks := testOpen(t, dir, Options{Keeper: k})
	const author = "ErasedAuthorQ7"
	for _, id := range []string{"e2", "e1"} {
		if err := ks.PutErasure(ctx, id, author); err != nil {
			t.Fatal(err)
		}
	}
	if err := ks.db.Flush(); err != nil {
		t.Fatal(err)
	}
	sealed := stored(t, ks, []byte(erasureNS+"e1"))
	if err := ks.Close(); err != nil {
		t.Fatal(err)
	}
	storetest.RequireNone(t, dir, author)
	storetest.RequireAll(t, dir, sealed)

	ks = testOpen(t, dir, Options{Keeper: k})
	if got, err := ks.ErasureAuthor(ctx, "e1"); err != nil || got != author {
		t.Fatalf("ErasureAuthor = %q, %v", got, err)
	}
	if ids, err := ks.PendingErasures(ctx); err != nil || !slices.Equal(ids, []string{"e1", "e2"}) {
		t.Fatalf("PendingErasures = %v, %v", ids, err)
	}
	// Moved to another ID, the sealed author does not open.
	if err := ks.db.Set([]byte(erasureNS+"e3"), []byte(sealed), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.ErasureAuthor(ctx, "e3"); err == nil {
		t.Fatal("a sealed author opened under another erasure's ID")
	}

	for _, id := range []string{"e1", "e3"} {
		if err := ks.CompleteErasure(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ks.ErasureAuthor(ctx, "e1"); !errors.Is(err, ErrNoErasure) {
		t.Fatalf("ErasureAuthor of a completed erasure: %v", err)
	}
	if ok, _ := ks.Erased(ctx); ok {
		t.Fatal("Erased true with a completed erasure's entry not erased")
	}
	if _, err := ks.Erase(ctx, erase.Options{}); err != nil {
		t.Fatal(err)
	}
	storetest.RequireNone(t, dir, sealed)
	if ids, _ := ks.PendingErasures(ctx); !slices.Equal(ids, []string{"e2"}) {
		t.Fatalf("PendingErasures after completing e1 and e3 = %v", ids)
	}
}
