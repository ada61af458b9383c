package retention

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/keystore"
)

// A rotation waits for no one: with the lease held it re-wraps nothing
// and says who holds it; free, it re-wraps every key of the key store,
// and a second call finds nothing left.
func TestRotateKEKUnderTheLease(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	ks := sealEnv(e, nil)
	e.thread("t1", 2, 1)
	e.thread("t2", 1, 1)
	to, err := keystore.OpenKEK(ctx, "base64key://"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{6}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	defer to.Close()

	held, err := AcquireLease(ctx, e.runner().leaseConfig())
	if err != nil {
		t.Fatal(err)
	}
	var lh *LeaseHeldError
	if res, err := e.runner().RotateKEK(ctx, ks, to, keystore.RewrapOptions{}); !errors.As(err, &lh) || res.Rewrapped != 0 {
		t.Fatalf("lease held: %+v %v, want a *LeaseHeldError and nothing re-wrapped", res, err)
	}
	if err := held.Release(); err != nil {
		t.Fatal(err)
	}

	res, err := e.runner().RotateKEK(ctx, ks, to, keystore.RewrapOptions{})
	if err != nil || res.Rewrapped == 0 {
		t.Fatalf("rotate: %+v %v, want every key re-wrapped", res, err)
	}
	if again, err := e.runner().RotateKEK(ctx, ks, to, keystore.RewrapOptions{}); err != nil || again.Rewrapped != 0 {
		t.Fatalf("second rotation: %+v %v, want nothing left to re-wrap", again, err)
	}
}
