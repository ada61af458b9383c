package keystore_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gocloud.dev/secrets"

	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// kekURL is the local KEK URL of 32 bytes of fill, in standard base64.
func kekURL(fill byte) string {
	return "base64key://" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{fill}, 32))
}

func keeper(t testing.TB, fill byte) *secrets.Keeper {
	t.Helper()
	k, err := keystore.OpenKEK(context.Background(), kekURL(fill))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return k
}

func open(t testing.TB, dir string, k *secrets.Keeper) *keystore.KeyStore {
	t.Helper()
	ks, err := keystore.Open(context.Background(), dir, keystore.Options{Keeper: k, DataPath: filepath.Join(filepath.Dir(dir), "data")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ks.Close() })
	return ks
}

// seal seals plain with the author's key in the thread.
func seal(t testing.TB, ks *keystore.KeyStore, tid, author, plain string) (uint32, []byte) {
	t.Helper()
	num, a, err := ks.Key(context.Background(), tid, author)
	if err != nil {
		t.Fatal(err)
	}
	return num, a.Seal(nil, nil, []byte(plain), []byte(tid))
}

// opens reports whether the key number of the thread opens sealed.
func opens(t testing.TB, ks *keystore.KeyStore, tid string, num uint32, sealed []byte) bool {
	t.Helper()
	a, err := ks.KeyByNumber(context.Background(), tid, num)
	if errors.Is(err, keystore.ErrNoKey) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Open(nil, nil, sealed, []byte(tid))
	return err == nil
}

// A KEK that is empty, short, long, not base64 or of an unknown scheme is
// refused with an error naming PROGRESSDB_KEK and never holding the key;
// standard and URL-safe base64 of 32 bytes open the same key.
// Every KMS scheme a KEK may name has its driver built in: opening one
// here, with no cloud credentials, fails (or not) for want of the service,
// never for want of a driver.
func TestKMSDriversAreBuiltIn(t *testing.T) {
	t.Setenv("VAULT_ADDR", "")
	t.Setenv("VAULT_SERVER_URL", "")
	for _, url := range []string{
		"awskms://alias/progressdb?region=eu-west-1",
		"gcpkms://projects/p/locations/global/keyRings/r/cryptoKeys/k",
		"azurekeyvault://progressdb.vault.azure.net/keys/kek",
		"hashivault://progressdb",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		k, err := keystore.OpenKEK(ctx, url)
		cancel()
		if err != nil && strings.Contains(err.Error(), "no driver registered") {
			t.Errorf("OpenKEK(%q): %v", url, err)
		}
		if k != nil {
			_ = k.Close()
		}
	}
}

func TestOpenKEK(t *testing.T) {
	ctx := context.Background()
	// 0xfb bytes encode to "+/v7...": both characters URL-safe base64 lacks.
	std := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32))
	if !strings.ContainsAny(std, "+/") {
		t.Fatalf("test key %s has no + or /", std)
	}
	for _, tc := range []struct{ name, url, secret string }{
		{"empty", "", ""},
		{"blank", "   ", ""},
		{"no key", "base64key://", ""},
		{"short", "base64key://" + base64.StdEncoding.EncodeToString(make([]byte, 31)), ""},
		{"long", "base64key://" + base64.StdEncoding.EncodeToString(make([]byte, 33)), ""},
		{"not base64", "base64key://SecretNotBase64!!", "SecretNotBase64"},
		{"query", "base64key://" + std + "?x=1", std},
		{"no scheme", std, std},
		{"unknown scheme", "file:///etc/kek", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := keystore.OpenKEK(ctx, tc.url)
			if !errors.Is(err, keystore.ErrInvalidKEK) {
				t.Fatalf("OpenKEK(%q) = %v, want ErrInvalidKEK", tc.url, err)
			}
			if !strings.Contains(err.Error(), "PROGRESSDB_KEK") {
				t.Fatalf("error does not name PROGRESSDB_KEK: %v", err)
			}
			if tc.secret != "" && strings.Contains(err.Error(), tc.secret) {
				t.Fatalf("error holds the key: %v", err)
			}
		})
	}

	a, err := keystore.OpenKEK(ctx, "base64key://"+std)
	if err != nil {
		t.Fatal(err)
	}
	b, err := keystore.OpenKEK(ctx, "base64key://"+base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	w, err := a.Encrypt(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := b.Decrypt(ctx, w); err != nil || string(p) != "x" {
		t.Fatalf("URL-safe form of the key does not open the standard form's value: %q, %v", p, err)
	}

	gen, err := keystore.GenerateKEK()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keystore.OpenKEK(ctx, gen); err != nil {
		t.Fatalf("generated %q: %v", gen, err)
	}
	again, _ := keystore.GenerateKEK()
	if again == gen {
		t.Fatal("two generated KEKs are equal")
	}
}

// The key store never lives in the data directory, nor holds it, however
// the path is spelled; nothing is created when it is refused.
func TestOpenRefusesInsideDataPath(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	data := filepath.Join(root, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(data, link); err != nil {
		t.Fatal(err)
	}
	k := keeper(t, 1)
	for _, tc := range []struct{ name, path, dataPath string }{
		{"same", data, data},
		{"inside", filepath.Join(data, "keys"), data},
		{"inside, not clean", data + "/./x/../keys", data},
		{"holds it", root, data},
		{"through a link", filepath.Join(link, "keys"), data},
		{"data through a link", filepath.Join(data, "keys"), link},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := keystore.Open(ctx, tc.path, keystore.Options{Keeper: k, DataPath: tc.dataPath})
			if !errors.Is(err, keystore.ErrInsideDataPath) {
				t.Fatalf("Open(%s) with data %s = %v, want ErrInsideDataPath", tc.path, tc.dataPath, err)
			}
			if _, err := os.Stat(filepath.Join(data, "keys")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a refused open created %s", filepath.Join(data, "keys"))
			}
		})
	}
	ks, err := keystore.Open(ctx, filepath.Join(root, "data-keys"), keystore.Options{Keeper: k, DataPath: data})
	if err != nil {
		t.Fatalf("a sibling whose name starts like the data folder's is outside it: %v", err)
	}
	_ = ks.Close()
	info, err := os.Stat(filepath.Join(root, "data-keys"))
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("key store folder mode = %v, %v; want 0700", info.Mode().Perm(), err)
	}
}

// One key per (thread, author), numbered from 1 in each thread, the same
// on every call and after a reopen; a value sealed before a reopen opens
// after it; another KEK does not open the store.
func TestKeyCreateOrGet(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "keys")
	ks := open(t, dir, keeper(t, 1))
	for _, tc := range []struct {
		tid, author string
		want        uint32
	}{{"t1", "alice", 1}, {"t1", "bob", 2}, {"t1", "alice", 1}, {"t2", "alice", 1}, {"t2", "", 2}} {
		if num, _, err := ks.Key(ctx, tc.tid, tc.author); err != nil || num != tc.want {
			t.Fatalf("Key(%s, %q) = %d, %v; want %d", tc.tid, tc.author, num, err, tc.want)
		}
	}
	num, sealed := seal(t, ks, "t1", "bob", "hello")
	if _, _, err := ks.Key(ctx, "t:1", "alice"); !errors.Is(err, keystore.ErrInvalidThread) {
		t.Fatalf("Key on an invalid thread ID = %v", err)
	}
	if err := ks.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ks.Key(ctx, "t1", "bob"); !errors.Is(err, keystore.ErrClosed) {
		t.Fatalf("Key after Close = %v, want ErrClosed", err)
	}

	if _, err := keystore.Open(ctx, dir, keystore.Options{Keeper: keeper(t, 2)}); !errors.Is(err, keystore.ErrWrongKEK) {
		t.Fatalf("open with another KEK = %v, want ErrWrongKEK", err)
	}
	ks = open(t, dir, keeper(t, 1))
	if !opens(t, ks, "t1", num, sealed) {
		t.Fatal("a value sealed before the reopen does not open")
	}
	if opens(t, ks, "t1", 1, sealed) {
		t.Fatal("another author's key opens the value")
	}
	if n, _, err := ks.Key(ctx, "t1", "bob"); err != nil || n != num {
		t.Fatalf("Key(t1, bob) after reopen = %d, %v; want %d", n, err, num)
	}
	if n, _, err := ks.Key(ctx, "t1", "carol"); err != nil || n != 3 {
		t.Fatalf("a third author's key = %d, %v; want 3", n, err)
	}
	if _, err := ks.KeyByNumber(ctx, "t1", 9); !errors.Is(err, keystore.ErrNoKey) {
		t.Fatalf("KeyByNumber of a number never created = %v, want ErrNoKey", err)
	}
}

// The author index finds an author's keys in every thread; the author's
// name is in no file of the key store, and the receipt names the author by
// an HMAC that is stable across reopens and differs between authors.
func TestAuthorIndex(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "keys")
	ks := open(t, dir, keeper(t, 1))
	const author = "AuthorNameZ9"
	for _, tid := range []string{"t3", "t1", "t2"} {
		if _, _, err := ks.Key(ctx, tid, "other"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ks.Key(ctx, tid, author); err != nil {
			t.Fatal(err)
		}
	}
	refs, err := ks.AuthorKeys(ctx, author)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(refs); got != "[{t1 2} {t2 2} {t3 2}]" {
		t.Fatalf("AuthorKeys = %s", got)
	}
	if refs, _ := ks.AuthorKeys(ctx, "nobody"); len(refs) != 0 {
		t.Fatalf("AuthorKeys of an unknown author = %v", refs)
	}
	subject := ks.Subject(author)
	if !strings.HasPrefix(subject, "hmac-sha256:") || strings.Contains(subject, author) || subject == ks.Subject("other") {
		t.Fatalf("Subject = %s", subject)
	}
	storetest.RequireNone(t, dir, author)
	if err := ks.Close(); err != nil {
		t.Fatal(err)
	}
	storetest.RequireNone(t, dir, author)
	ks = open(t, dir, keeper(t, 1))
	if ks.Subject(author) != subject {
		t.Fatal("the subject HMAC changed across a reopen")
	}
}

// Destroying a thread's keys makes its values unreadable at once, in
// memory and after a reopen, removes them from the author index, and
// leaves other threads alone; a thread created again under the ID gets
// new keys that do not open the old values.
func TestDestroyThread(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "keys")
	ks := open(t, dir, keeper(t, 1))
	n1, s1 := seal(t, ks, "t1", "alice", "one")
	seal(t, ks, "t1", "bob", "two")
	n2, s2 := seal(t, ks, "t2", "alice", "three")
	if !opens(t, ks, "t1", n1, s1) {
		t.Fatal("value does not open before destroy")
	}
	if n, err := ks.DestroyThread(ctx, "t1"); err != nil || n != 2 {
		t.Fatalf("DestroyThread = %d, %v; want 2", n, err)
	}
	if opens(t, ks, "t1", n1, s1) {
		t.Fatal("a destroyed key still opens (cache)")
	}
	if n, err := ks.DestroyThread(ctx, "t1"); err != nil || n != 0 {
		t.Fatalf("repeated DestroyThread = %d, %v; want 0", n, err)
	}
	if refs, _ := ks.AuthorKeys(ctx, "alice"); fmt.Sprint(refs) != "[{t2 1}]" {
		t.Fatalf("alice's keys after destroying t1 = %v", refs)
	}
	if !opens(t, ks, "t2", n2, s2) {
		t.Fatal("another thread's key is gone")
	}
	if err := ks.Close(); err != nil {
		t.Fatal(err)
	}
	ks = open(t, dir, keeper(t, 1))
	if opens(t, ks, "t1", n1, s1) {
		t.Fatal("a destroyed key opens after a reopen")
	}
	n, _ := seal(t, ks, "t1", "alice", "again")
	if n != n1 {
		t.Fatalf("a re-created thread's first key is %d, want %d", n, n1)
	}
	if opens(t, ks, "t1", n, s1) {
		t.Fatal("a re-created thread's key opens the old thread's value")
	}
}

// Destroying an author's keys destroys them in every thread but those
// kept (legal holds), leaves other authors' keys, and never reuses the
// number: the author's next key in a thread is a new one.
func TestDestroyAuthor(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "keys")
	ks := open(t, dir, keeper(t, 1))
	sealed := map[string][]byte{}
	for _, tid := range []string{"t1", "t2", "t3"} {
		_, sealed[tid] = seal(t, ks, tid, "alice", "by alice in "+tid)
	}
	nb, sb := seal(t, ks, "t1", "bob", "by bob")
	destroyed, kept, err := ks.DestroyAuthor(ctx, "alice", func(tid string) (bool, error) { return tid == "t2", nil })
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(destroyed) != "[{t1 1} {t3 1}]" || fmt.Sprint(kept) != "[{t2 1}]" {
		t.Fatalf("destroyed %v, kept %v", destroyed, kept)
	}
	for tid, want := range map[string]bool{"t1": false, "t2": true, "t3": false} {
		if got := opens(t, ks, tid, 1, sealed[tid]); got != want {
			t.Fatalf("alice's value in %s opens = %v, want %v", tid, got, want)
		}
	}
	if !opens(t, ks, "t1", nb, sb) {
		t.Fatal("bob's key went with alice's")
	}
	if refs, _ := ks.AuthorKeys(ctx, "alice"); fmt.Sprint(refs) != "[{t2 1}]" {
		t.Fatalf("alice's keys after the erasure = %v", refs)
	}
	stop := errors.New("hold lookup failed")
	if _, _, err := ks.DestroyAuthor(ctx, "alice", func(string) (bool, error) { return false, stop }); !errors.Is(err, stop) {
		t.Fatalf("a failing keep = %v", err)
	}
	if err := ks.Close(); err != nil {
		t.Fatal(err)
	}
	ks = open(t, dir, keeper(t, 1))
	if opens(t, ks, "t1", 1, sealed["t1"]) || !opens(t, ks, "t2", 1, sealed["t2"]) {
		t.Fatal("after a reopen the erasure is not as it was")
	}
	if n, _, err := ks.Key(ctx, "t1", "alice"); err != nil || n != 3 {
		t.Fatalf("alice's next key in t1 = %d, %v; want 3 (never a reused number)", n, err)
	}
}

// After DestroyThread returns, no KeyByNumber succeeds, whatever readers
// were filling the cache at the same time.
func TestDestroyLeavesNothingCached(t *testing.T) {
	ctx := context.Background()
	ks := open(t, filepath.Join(t.TempDir(), "keys"), keeper(t, 1))
	const threads = 16
	var wg sync.WaitGroup
	var failures atomic.Int32
	for i := range threads {
		tid := fmt.Sprintf("t%d", i)
		num, sealed := seal(t, ks, tid, "alice", "x")
		var destroyed atomic.Bool
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					was := destroyed.Load()
					a, err := ks.KeyByNumber(ctx, tid, num)
					if err == nil {
						if _, err := a.Open(nil, nil, sealed, []byte(tid)); err != nil {
							failures.Add(1)
						}
					}
					if was {
						if err == nil {
							failures.Add(1)
						}
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ks.DestroyThread(ctx, tid); err != nil {
				t.Error(err)
			}
			destroyed.Store(true)
		}()
	}
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d reads opened a destroyed key or failed on a live one", n)
	}
}
