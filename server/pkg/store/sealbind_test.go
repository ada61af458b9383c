package store_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

const (
	formatKey = store.FormatKeyForTest
	sealKey   = store.SealKeyForTest
)

// openKeys opens (creating) the key store dir/keys for a database at
// dir/data, bound to database (none when "").
func openKeys(t *testing.T, dir, database string, mustExist bool) (*keystore.KeyStore, error) {
	t.Helper()
	keeper, err := keystore.OpenKEK(context.Background(), "base64key://"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	return keystore.Open(context.Background(), filepath.Join(dir, "keys"), keystore.Options{Keeper: keeper,
		DataPath: filepath.Join(dir, "data"), Database: database, MustExist: mustExist})
}

// openSealedAt opens dir/data sealed under dir/keys.
func openSealedAt(t *testing.T, dir string) (*store.Store, error) {
	t.Helper()
	ks, err := openKeys(t, dir, "", false)
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(filepath.Join(dir, "data"), store.Options{Sealer: ks, Closer: ks})
	if err != nil {
		_ = ks.Close()
	}
	return s, err
}

// rawEdit changes the database at path under the store's back: what a
// release before the marker left, or damage.
func rawEdit(t *testing.T, path string, edit func(b *pebble.Batch)) {
	t.Helper()
	db, err := pebble.Open(path, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	edit(b)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func rawGet(t *testing.T, path, key string) (string, bool) {
	t.Helper()
	db, err := pebble.Open(path, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, closer, err := db.Get([]byte(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	return string(v), true
}

// The store refuses plaintext in a sealed database even when a caller
// forgot the Sealer: a reopen without one is refused, and a write that
// reaches the store without one is too.
func TestStoreRefusesPlaintextInSealedDatabase(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := openSealedAt(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateThread(ctx, store.Thread{ID: "t", Title: "x", Author: "a"}); err != nil {
		t.Fatal(err)
	}
	if f, err := s.Format(ctx); err != nil || f != store.FormatSealed {
		t.Fatalf("format = %v, %v; want %v", f, err, store.FormatSealed)
	}
	// A caller that drops the Sealer (belt and braces: store.Open gives none).
	giveBack := store.DropSealer(s)
	if _, err := s.CreateThread(ctx, store.Thread{ID: "u", Title: "plain", Author: "a"}); !errors.Is(err, store.ErrSealedNeedsKEK) {
		t.Errorf("plain thread into a sealed database: %v; want ErrSealedNeedsKEK", err)
	}
	if _, err := s.AppendMessage(ctx, "t", store.Message{ID: "m", Author: "a", Body: []byte(`"plain"`)}); !errors.Is(err, store.ErrSealedNeedsKEK) {
		t.Errorf("plain message into a sealed database: %v; want ErrSealedNeedsKEK", err)
	}
	bk := s.NewBulk()
	if err := bk.PutThread(store.Thread{ID: "v", Title: "plain", Author: "a"}); !errors.Is(err, store.ErrSealedNeedsKEK) {
		t.Errorf("bulk plain thread: %v; want ErrSealedNeedsKEK", err)
	}
	_ = bk.Close()
	giveBack()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Open(filepath.Join(dir, "data"), store.Options{}); !errors.Is(err, store.ErrSealedNeedsKEK) {
		t.Fatalf("open without a Sealer: %v; want ErrSealedNeedsKEK", err)
	}
}

// A sealed database opens only with its own key store: another database's
// and a fresh one are refused (the fresh one is left unbound).
func TestSealedDatabaseRefusesAForeignKeyStore(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		s, err := openSealedAt(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	fresh := t.TempDir()
	for name, keysDir := range map[string]string{"another database's": b, "a fresh one": fresh} {
		ks, err := openKeys(t, keysDir, "", false)
		if err != nil {
			t.Fatal(err)
		}
		_, err = store.Open(filepath.Join(a, "data"), store.Options{Sealer: ks, Closer: ks})
		var fe *store.ForeignKeyStoreError
		if !errors.Is(err, store.ErrForeignKeyStore) || !errors.As(err, &fe) || fe.KeyStoreID != ks.ID() {
			t.Errorf("%s key store: %v; want store.ErrForeignKeyStore naming it", name, err)
		}
		if name == "a fresh one" && ks.Database() != "" {
			t.Errorf("the fresh key store was bound to %s", ks.Database())
		}
		_ = ks.Close()
	}
	if _, err := openKeys(t, t.TempDir(), "", true); !errors.Is(err, keystore.ErrNoKeyStore) {
		t.Errorf("MustExist on a missing key store: %v; want ErrNoKeyStore", err)
	}
}

// Sealing is two synced writes: the key store bound to the database, then
// the database marked. A start between the two finds a key store bound to
// it and finishes the marking.
func TestSealingFinishesAfterACrashBetweenBindAndMark(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := store.Open(filepath.Join(dir, "data"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.DatabaseID(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	ks, err := openKeys(t, dir, id, false) // bound; the database not marked yet
	if err != nil {
		t.Fatal(err)
	}
	ksID := ks.ID()
	if _, ok := rawGet(t, filepath.Join(dir, "data"), sealKey); ok {
		t.Fatal("marked before the open")
	}
	s, err = store.Open(filepath.Join(dir, "data"), store.Options{Sealer: ks, Closer: ks})
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.SealInfo(ctx)
	if err != nil || !info.Sealed || info.KeyStoreID != ksID {
		t.Fatalf("seal = %+v, %v; want sealed under %s", info, err, ksID)
	}
	if r, err := s.OwedRaises(ctx); err != nil || len(r) != 1 || r[0].From != store.FormatBase || r[0].To != store.FormatSealed {
		t.Fatalf("owed raises = %+v, %v; want one from %v to %v", r, err, store.FormatBase, store.FormatSealed)
	}
	_ = s.Close()
}

// A database written before the marker opens and is marked: in the base
// format when it holds no sealed content, sealed when it does (a database
// sealed by the release that introduced sealing), and then it is refused
// without its key store like any sealed one.
func TestDatabaseFromBeforeTheMarker(t *testing.T) {
	ctx := context.Background()
	plain, sealed := t.TempDir(), t.TempDir()
	s, err := store.Open(filepath.Join(plain, "data"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateThread(ctx, store.Thread{ID: "t", Title: "x", Author: "a"}); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	s, err = openSealedAt(t, sealed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateThread(ctx, store.Thread{ID: "t", Title: "x", Author: "a"}); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	for _, dir := range []string{plain, sealed} {
		rawEdit(t, filepath.Join(dir, "data"), func(b *pebble.Batch) {
			_ = b.Delete([]byte(formatKey), nil)
			_ = b.Delete([]byte(sealKey), nil)
		})
	}

	s, err = store.Open(filepath.Join(plain, "data"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if v, ok := rawGet(t, filepath.Join(plain, "data"), formatKey); !ok || v != "1" {
		t.Fatalf("plain database from before the marker: format %q, %v; want 1 recorded", v, ok)
	}

	if _, err := store.Open(filepath.Join(sealed, "data"), store.Options{}); !errors.Is(err, store.ErrSealedNeedsKEK) {
		t.Fatalf("sealed database from before the marker without a Sealer: %v; want ErrSealedNeedsKEK", err)
	}
	if v, ok := rawGet(t, filepath.Join(sealed, "data"), formatKey); !ok || v != "2" {
		t.Fatalf("sealed database from before the marker: format %q, %v; want 2 recorded", v, ok)
	}
	s, err = openSealedAt(t, sealed)
	if err != nil {
		t.Fatalf("with its key store: %v", err)
	}
	info, err := s.SealInfo(ctx)
	if err != nil || !info.Sealed || info.KeyStoreID == "" {
		t.Fatalf("seal = %+v, %v; want sealed under its key store", info, err)
	}
	th, err := s.GetThread(ctx, "t")
	if err != nil || th.Title != "x" {
		t.Fatalf("thread = %+v, %v", th, err)
	}
	_ = s.Close()
}

// A copy of a sealed database and its key store (a replica's snapshot
// of its leader's) given back the replica's key store identity opens
// with that key store only: the database's seal record and the key
// store's binding name each other, the content still opens, and the
// key store of the original identity is refused.
func TestRebindKeyStoreKeepsTheCopysKeyStoreIdentity(t *testing.T) {
	ctx := context.Background()
	orig, copied := t.TempDir(), t.TempDir()
	s, err := openSealedAt(t, orig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateThread(ctx, store.Thread{ID: "t1", Title: "sealed title", Author: "ann"}); err != nil {
		t.Fatal(err)
	}
	origKS := s.Sealer().ID()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"data", "keys"} {
		if err := os.CopyFS(filepath.Join(copied, d), os.DirFS(filepath.Join(orig, d))); err != nil {
			t.Fatal(err)
		}
	}
	const own = "0123456789abcdef"
	s, err = openSealedAt(t, copied)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RebindKeyStore(ctx, own); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = openSealedAt(t, copied)
	if err != nil {
		t.Fatalf("the copy with its rebound key store: %v", err)
	}
	id, err := s.DatabaseID(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.SealInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ks := s.Sealer(); ks.ID() != own || ks.Database() != id || info.KeyStoreID != own {
		t.Fatalf("key store %s of database %s, the database sealed under %s; want %s of %s", ks.ID(), ks.Database(), info.KeyStoreID, own, id)
	}
	if th, err := s.GetThread(ctx, "t1"); err != nil || th.Title != "sealed title" {
		t.Fatalf("the copy's thread: %+v (%v)", th, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ks, err := openKeys(t, orig, "", true)
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Close()
	if ks.ID() != origKS {
		t.Fatalf("the original key store is %s, was %s", ks.ID(), origKS)
	}
	if _, err := store.Open(filepath.Join(copied, "data"), store.Options{Sealer: ks}); !errors.Is(err, store.ErrForeignKeyStore) {
		t.Fatalf("the copy with the original key store: %v; want store.ErrForeignKeyStore", err)
	}
}
