package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/pkg/keystore"
)

func testKeeper(t *testing.T, b byte) Wrapper {
	t.Helper()
	k, err := keystore.OpenKEK(context.Background(), "base64key://"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// The receipt key is made once and re-wrapped once: a rotation run again
// changes nothing, the key under the new KEK is the same key, and a KEK
// that is neither is refused with ErrReceiptKey.
func TestReceiptKeyRewrappedOnce(t *testing.T) {
	c := etcdtest.Start(t).Client(t)
	k := Keys{Name: "rk"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	oldKEK, newKEK, other := testKeeper(t, 1), testKeeper(t, 2), testKeeper(t, 3)
	key, err := EnsureReceiptKey(ctx, c, k, oldKEK)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := EnsureReceiptKey(ctx, c, k, oldKEK); err != nil || !bytes.Equal(again, key) {
		t.Fatalf("a second EnsureReceiptKey made another key: %v", err)
	}
	for i, want := range []bool{true, false} {
		if got, err := RewrapReceiptKey(ctx, c, k, oldKEK, newKEK); err != nil || got != want {
			t.Fatalf("rewrap %d: %v, %v; want %v", i, got, err, want)
		}
	}
	if got, err := EnsureReceiptKey(ctx, c, k, newKEK); err != nil || !bytes.Equal(got, key) {
		t.Fatalf("under the new KEK: another key, or %v", err)
	}
	if _, err := EnsureReceiptKey(ctx, c, k, oldKEK); !errors.Is(err, ErrReceiptKey) {
		t.Errorf("the old KEK after the rotation: %v, want ErrReceiptKey", err)
	}
	if _, err := RewrapReceiptKey(ctx, c, k, other, testKeeper(t, 4)); !errors.Is(err, ErrReceiptKey) {
		t.Errorf("a rotation from a KEK that is not the cluster's: %v, want ErrReceiptKey", err)
	}
}
