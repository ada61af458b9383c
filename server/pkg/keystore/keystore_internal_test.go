package keystore

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"

	"gocloud.dev/secrets"
	"gocloud.dev/secrets/localsecrets"

	"github.com/progressdb/progressdb/server/pkg/erase"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

func testKeeper(t *testing.T, fill byte) *secrets.Keeper {
	t.Helper()
	var key [32]byte
	for i := range key {
		key[i] = fill
	}
	k := localsecrets.NewKeeper(key)
	t.Cleanup(func() { _ = k.Close() })
	return k
}

func testOpen(t *testing.T, dir string, opts Options) *KeyStore {
	t.Helper()
	ks, err := Open(context.Background(), dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ks.Close() })
	return ks
}

// stored is the value of a key as it is in the store's files: for a data
// key, the author's HMAC and the wrapped DEK.
func stored(t *testing.T, ks *KeyStore, key []byte) string {
	t.Helper()
	v, ok, err := ks.get(key)
	if err != nil || !ok {
		t.Fatalf("%s: %v, found %v", key, err, ok)
	}
	return string(v)
}

// A destroyed key stays in the key store's files until Erase, and is in
// none after it (tables decoded, WAL tails read); live keys stay. Keys
// destroyed before a restart are erased by a full erase.
func TestEraseRemovesDestroyedKeys(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "keys")
	k := testKeeper(t, 1)
	ks := testOpen(t, dir, Options{Keeper: k})
	for _, tid := range []string{"t1", "t2", "t3"} {
		if _, _, err := ks.Key(ctx, tid, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	if err := ks.db.Flush(); err != nil { // the keys in a table as well as in the log
		t.Fatal(err)
	}
	gone1 := stored(t, ks, keyEntry("t1", 1))
	gone2 := stored(t, ks, keyEntry("t2", 1))
	live := stored(t, ks, keyEntry("t3", 1))
	if res, err := ks.Erase(ctx, erase.Options{}); err != nil || !res.Nothing {
		t.Fatalf("Erase with nothing destroyed = %+v, %v", res, err)
	}

	if _, err := ks.DestroyThread(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	storetest.RequireAll(t, dir, gone1)
	if ok, err := ks.Erased(ctx); err != nil || ok {
		t.Fatalf("Erased after a destroy = %v, %v; want false", ok, err)
	}
	res, err := ks.Erase(ctx, erase.Options{})
	if err != nil || res.Full || res.Nothing || res.Ranges == 0 {
		t.Fatalf("Erase = %+v, %v; want an erase of the destroyed spans", res, err)
	}
	storetest.RequireNone(t, dir, gone1)
	storetest.RequireAll(t, dir, gone2, live)
	if ok, _ := ks.Erased(ctx); !ok {
		t.Fatal("Erased false after Erase")
	}

	// Destroyed, then the process goes: the spans are forgotten, the debt
	// is not.
	if _, _, err := ks.DestroyAuthor(ctx, "alice", func(tid string) (bool, error) { return tid == "t3", nil }); err != nil {
		t.Fatal(err)
	}
	if err := ks.Close(); err != nil {
		t.Fatal(err)
	}
	// Scanned while closed: a reopened store flushes the log it recovered
	// in the background, and a table half written is no table to decode.
	storetest.RequireAll(t, dir, gone2)
	ks = testOpen(t, dir, Options{Keeper: k})
	res, err = ks.Erase(ctx, erase.Options{})
	if err != nil || !res.Full {
		t.Fatalf("Erase after a restart = %+v, %v; want a full erase", res, err)
	}
	storetest.RequireNone(t, dir, gone1, gone2)
	storetest.RequireAll(t, dir, live)
	if _, err := ks.KeyByNumber(ctx, "t3", 1); err != nil {
		t.Fatalf("a kept key after the erase: %v", err)
	}
}

// A rotation re-wraps every key under the new KEK: afterwards only the new
// KEK opens the store, every value sealed before opens, and no value
// wrapped by the old KEK is left in a file. A rotation killed part way
// opens with neither KEK alone and is finished by running it again.
func TestRewrap(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "keys")
	oldK, newK, otherK := testKeeper(t, 1), testKeeper(t, 2), testKeeper(t, 3)
	ks := testOpen(t, dir, Options{Keeper: oldK})
	type sealedValue struct {
		tid    string
		num    uint32
		sealed []byte
	}
	var values []sealedValue
	var oldWrapped []string
	for i := range 2*rewrapSync + 5 {
		tid := "t" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		num, a, err := ks.Key(ctx, tid, "alice")
		if err != nil {
			t.Fatal(err)
		}
		values = append(values, sealedValue{tid, num, a.Seal(nil, nil, []byte("v"), nil)})
		oldWrapped = append(oldWrapped, stored(t, ks, keyEntry(tid, num))[32:])
	}
	oldWrapped = append(oldWrapped, stored(t, ks, []byte(indexSecretKey)), stored(t, ks, []byte(receiptSecretKey)))
	subject := ks.Subject("alice")

	// Killed after the first batch.
	cctx, cancel := context.WithCancel(ctx)
	ks.afterRewrapBatch = cancel
	if _, err := ks.Rewrap(cctx, newK, RewrapOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted Rewrap = %v", err)
	}
	if err := ks.Close(); err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]Options{
		"old KEK alone": {Keeper: oldK},
		"new KEK alone": {Keeper: newK},
	} {
		if _, err := Open(ctx, dir, opts); !errors.Is(err, ErrRotationUnfinished) {
			t.Fatalf("%s during a rotation: %v, want ErrRotationUnfinished", name, err)
		}
	}
	if _, err := Open(ctx, dir, Options{Keeper: oldK, RotateTo: otherK}); !errors.Is(err, ErrWrongKEK) {
		t.Fatalf("finishing with another new KEK: %v, want ErrWrongKEK", err)
	}
	ks = testOpen(t, dir, Options{Keeper: oldK, RotateTo: newK})
	var reports []RewrapProgress
	res, err := ks.Rewrap(ctx, newK, RewrapOptions{Progress: func(p RewrapProgress) { reports = append(reports, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rewrapped == 0 || res.Rewrapped >= len(oldWrapped) || !res.Erase.Full {
		t.Fatalf("resumed Rewrap = %+v; want the rest re-wrapped and a full erase", res)
	}
	// Progress: the values left counted first, then every batch synced,
	// then each step of the erase.
	// (Total counts the secrets too, re-wrapped before the kill or not.)
	total := reports[0].Total
	if len(reports) < 3 || reports[0].Done != 0 || total < res.Rewrapped || total > res.Rewrapped+2 {
		t.Fatalf("progress %+v, want 0 of the %d values left first", reports, res.Rewrapped)
	}
	var counted, erasing bool
	for _, p := range reports {
		counted = counted || (p.Done == total && p.Total == total && p.Erase == nil)
		erasing = erasing || (p.Erase != nil && p.Done == total)
	}
	if !counted || !erasing || reports[len(reports)-1].Erase == nil {
		t.Fatalf("progress %+v, want %d of %d looked at, then the erase's steps", reports, total, total)
	}
	if err := ks.Close(); err != nil {
		t.Fatal(err)
	}
	storetest.RequireNone(t, dir, oldWrapped...)

	if _, err := Open(ctx, dir, Options{Keeper: oldK}); !errors.Is(err, ErrWrongKEK) {
		t.Fatalf("old KEK after the rotation: %v, want ErrWrongKEK", err)
	}
	ks = testOpen(t, dir, Options{Keeper: newK})
	for _, v := range values {
		a, err := ks.KeyByNumber(ctx, v.tid, v.num)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Open(nil, nil, v.sealed, nil); err != nil {
			t.Fatalf("value of %s after the rotation: %v", v.tid, err)
		}
	}
	if ks.Subject("alice") != subject {
		t.Fatal("the receipt key changed in the rotation")
	}
	if !bytes.Equal([]byte{ks.gen}, []byte{2}) {
		t.Fatalf("generation after one rotation = %d, want 2", ks.gen)
	}
	// Running it again finds nothing to re-wrap.
	if res, err := ks.Rewrap(ctx, newK, RewrapOptions{}); err != nil || res.Rewrapped != 0 {
		t.Fatalf("second Rewrap = %+v, %v", res, err)
	}
}
