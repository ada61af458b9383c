package retention

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"path/filepath"
	"testing"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// sealEnv turns e into a sealing server's world: its store is opened again
// with a key store at dir/keys under a local KEK (spec §12). preload, when
// set, writes into the plain store first (data from before sealing).
func sealEnv(e *env, preload func()) *keystore.KeyStore {
	e.t.Helper()
	if preload != nil {
		preload()
	}
	if err := e.st.Close(); err != nil {
		e.t.Fatal(err)
	}
	ctx := context.Background()
	keeper, err := keystore.OpenKEK(ctx, "base64key://"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{5}, 32)))
	if err != nil {
		e.t.Fatal(err)
	}
	ks, err := keystore.Open(ctx, filepath.Join(e.dir, "keys"), keystore.Options{Keeper: keeper, DataPath: filepath.Join(e.dir, "db")})
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(e.dir, "db"), store.Options{Now: e.clock.Now, Sealer: ks, Closer: ks})
	if err != nil {
		_ = ks.Close()
		e.t.Fatal(err)
	}
	e.st = st
	e.t.Cleanup(func() { _ = st.Close() })
	return ks
}

// A sealing server's thread purge destroys the thread's keys and erases
// them from the key store's files before its record says shredded; a
// message purge beside it is erased from the data files as before; a
// plain thread written before sealing is erased from the data files too.
func TestThreadPurgeShredsItsKeys(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.cfg.Erase = true
	// Flushed, so that the content is in tables only an erase rewrites.
	ks := sealEnv(e, func() {
		e.thread("old", 2, 1)
		if err := e.st.DB().Flush(); err != nil {
			t.Fatal(err)
		}
	})
	e.thread("t1", 3, 2)
	t2 := e.thread("t2", 2, 1)
	if err := e.st.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	keysDir := filepath.Join(e.dir, "keys")
	// The scan sees the thread's key entries while they are there.
	storetest.RequireAll(t, keysDir, "k:t1:k:", "k:t2:k:")

	e.deleteThread("t1")
	e.deleteThread("old")
	e.deleteMessage("t2", t2[0])
	e.at(31 * day)
	res, ra := e.run(e.runner(), RunRequest{Trigger: TriggerAdmin})
	if res.Purged != 3 {
		t.Fatalf("purged %d, want t1, old and %s: %+v", res.Purged, t2[0], res)
	}
	if it := ra.item(t, "t1"); it.Status != audit.StatusPurged || !it.Shredded {
		t.Errorf("t1's record: %+v, want purged and shredded", it)
	}
	if it := ra.item(t, t2[0]); it.Shredded {
		t.Errorf("a message purge is not shredded: %+v", it)
	}
	if !ra.Footer.Erased || !ra.Footer.KeystoreErased {
		t.Errorf("footer: erased %t, keystore_erased %t; want both\n%s", ra.Footer.Erased, ra.Footer.KeystoreErased, e.logs)
	}
	if _, err := ks.KeyByNumber(ctx, "t1", 1); !errors.Is(err, keystore.ErrNoKey) {
		t.Errorf("t1's key 1 after its purge: %v", err)
	}
	if _, err := ks.KeyByNumber(ctx, "t2", 1); err != nil {
		t.Errorf("t2's key: %v", err)
	}
	if err := e.st.Close(); err != nil {
		t.Fatal(err)
	}
	storetest.RequireNone(t, keysDir, "k:t1:", "secret-author")
	storetest.RequireAll(t, keysDir, "k:t2:k:")
	// Sealed content was never in clear; "old" was, before sealing, and
	// the erase step took it.
	storetest.RequireNone(t, filepath.Join(e.dir, "db"), "secret title", "secret body", "secret-author")
}

// Without a key store a thread purge is as before: no shredded record, no
// keystore_erased in the footer.
func TestThreadPurgeWithoutSealingIsNotShredded(t *testing.T) {
	e := newEnv(t)
	e.thread("t1", 1, 1)
	e.deleteThread("t1")
	e.at(31 * day)
	_, ra := e.run(e.runner(), RunRequest{Trigger: TriggerAdmin})
	if it := ra.item(t, "t1"); it.Shredded || ra.Footer.KeystoreErased {
		t.Errorf("record %+v, keystore_erased %t", it, ra.Footer.KeystoreErased)
	}
}

// A run stopped after the record was owed and again after the keys went
// is finished by the next run: one purged, shredded record, nothing left.
func TestShreddedPurgeResumesAfterEachStep(t *testing.T) {
	for _, step := range []string{"owed", "keys gone"} {
		t.Run(step, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			ks := sealEnv(e, nil)
			e.thread("t1", 2, 1)
			e.deleteThread("t1")
			e.at(31 * day)
			r := e.runner()
			runCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			stopAt := func(want string) func(context.Context, store.PurgeMarker) {
				return func(context.Context, store.PurgeMarker) {
					if step == want {
						cancel() // a shutdown right here
					}
				}
			}
			r.hooks.afterOweShred, r.hooks.afterShred = stopAt("owed"), stopAt("keys gone")
			if res, err := r.Run(runCtx, RunRequest{Trigger: TriggerAdmin}); err == nil && res.Status == audit.RunCompleted {
				t.Fatalf("run stopped at %s completed: %+v", step, res)
			}
			pending, err := e.st.PendingPurges(ctx)
			if err != nil || len(pending) != 1 || !pending[0].Shredded {
				t.Fatalf("pending purges after the stop: %+v, %v", pending, err)
			}
			_, gone := ks.KeyByNumber(ctx, "t1", 1)
			if (step == "keys gone") != errors.Is(gone, keystore.ErrNoKey) {
				t.Fatalf("key after stopping at %s: %v", step, gone)
			}
			res, ra := e.run(e.runner(), RunRequest{Trigger: TriggerAdmin})
			if it := ra.item(t, "t1"); it.Status != audit.StatusPurged || !it.Shredded || !it.Recovered {
				t.Fatalf("record: %+v (result %+v)", it, res)
			}
			if _, err := ks.KeyByNumber(ctx, "t1", 1); !errors.Is(err, keystore.ErrNoKey) {
				t.Errorf("key after the run: %v", err)
			}
			if e.exists(store.KindThread, "t1") {
				t.Error("thread t1 still there")
			}
			if pending, err := e.st.PendingPurges(ctx); err != nil || len(pending) != 0 {
				t.Errorf("pending purges: %+v, %v", pending, err)
			}
			if !ra.Footer.KeystoreErased {
				t.Error("keystore_erased false after the finishing run")
			}
		})
	}
}
