package keystore

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/erase"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// fillThreads writes keys of authors a0…a<authors-1> in threads t000…,
// as Key makes them but in one batch, settled into the store's bottom
// tables as a running store's are.
func fillThreads(t *testing.T, ks *KeyStore, threads, authors int) {
	t.Helper()
	ctx := context.Background()
	b := ks.db.NewBatch()
	defer b.Close()
	dek := make([]byte, 32)
	for i := range threads {
		tid := fmt.Sprintf("t%03d", i)
		for a := range authors {
			num := uint32(a + 1)
			mac := ks.mac(fmt.Sprintf("a%d", a))
			if _, err := rand.Read(dek); err != nil {
				t.Fatal(err)
			}
			wrapped, err := ks.wrap(ctx, ks.wrapGen(), dek)
			if err != nil {
				t.Fatal(err)
			}
			_ = b.Set(keyEntry(tid, num), append(mac[:len(mac):len(mac)], wrapped...), nil)
			_ = b.Set(authorEntry(tid, mac), appendNum(nil, num), nil)
			_ = b.Set(authorIndex(mac, tid, num), nil, nil)
		}
		_ = b.Set(nextKey(tid), appendNum(nil, uint32(authors+1)), nil)
	}
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if err := ks.Compact(ctx); err != nil {
		t.Fatal(err)
	}
}

// A purged thread's keys are unreadable once DestroyThread returns, stay
// in the files until the erase, and are in none after it (tables decoded,
// WAL tails read); the erase rewrites the tables around them, not the
// store; live keys stay; the store records format 3.
func TestDoomedThreadsErase(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "keys")
	ks := testOpen(t, dir, Options{Keeper: testKeeper(t, 1)})
	fillThreads(t, ks, 2000, 3)
	levels, err := ks.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	tables := 0
	for _, l := range levels {
		tables += len(l)
	}
	if tables < 8 {
		t.Fatalf("%d tables: too few for the test to tell a targeted erase from a whole one", tables)
	}
	gone := []string{stored(t, ks, keyEntry("t100", 1)), stored(t, ks, keyEntry("t100", 3)), stored(t, ks, keyEntry("t101", 2))}
	live := []string{stored(t, ks, keyEntry("t099", 1)), stored(t, ks, keyEntry("t102", 1)), stored(t, ks, keyEntry("t500", 2))}
	for _, tid := range []string{"t100", "t101"} {
		if n, err := ks.DestroyThread(ctx, tid); err != nil || n != 3 {
			t.Fatalf("DestroyThread(%s) = %d, %v; want 3", tid, n, err)
		}
	}
	if _, err := ks.KeyByNumber(ctx, "t100", 1); !errors.Is(err, ErrNoKey) {
		t.Fatalf("a destroyed key: %v; want ErrNoKey", err)
	}
	if ok, err := ks.DestroyKey(ctx, KeyRef{Thread: "t100", Number: 2}); err != nil || ok {
		t.Fatalf("DestroyKey of a destroyed thread's key = %v, %v; want false", ok, err)
	}
	if refs, _ := ks.AuthorKeys(ctx, "a0"); len(refs) != 1998 {
		t.Fatalf("a0 has %d keys after two threads were destroyed; want 1998", len(refs))
	}
	if ok, err := ks.Erased(ctx); err != nil || ok {
		t.Fatalf("Erased = %v, %v before the erase; want false", ok, err)
	}
	if f := stored(t, ks, []byte(formatKey)); f != "3" {
		t.Fatalf("format %q after a destroy; want 3", f)
	}
	storetest.RequireAll(t, dir, gone...)

	res, err := ks.Erase(ctx, erase.Options{})
	if err != nil || res.Full || res.Nothing {
		t.Fatalf("Erase = %+v, %v; want an erase of the doomed threads", res, err)
	}
	t.Logf("tables %d, replaced %d", tables, res.TablesRemoved)
	if res.TablesRemoved == 0 || res.TablesRemoved > 4 {
		t.Fatalf("the erase replaced %d of %d tables; want the few around two threads", res.TablesRemoved, tables)
	}
	storetest.RequireNone(t, dir, gone...)
	storetest.RequireAll(t, dir, live...)
	if ok, err := ks.Erased(ctx); err != nil || !ok {
		t.Fatalf("Erased = %v, %v after the erase", ok, err)
	}
	if ds, _ := ks.doomedThreads(); len(ds) != 0 {
		t.Fatalf("markers left after the erase: %v", ds)
	}
	if _, err := ks.KeyByNumber(ctx, "t102", 1); err != nil {
		t.Fatalf("a live key after the erase: %v", err)
	}
}

// A thread created again under a doomed thread's ID before the erase gets
// a new key, which the erase keeps; the old keys are erased.
func TestDoomedThreadCreatedAgain(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "keys")
	ks := testOpen(t, dir, Options{Keeper: testKeeper(t, 1)})
	fillThreads(t, ks, 3, 2)
	old := stored(t, ks, keyEntry("t001", 1))
	if _, err := ks.DestroyThread(ctx, "t001"); err != nil {
		t.Fatal(err)
	}
	num, _, err := ks.Key(ctx, "t001", "a0")
	if err != nil || num != 1 {
		t.Fatalf("Key in a thread created again = %d, %v; want a new key 1", num, err)
	}
	if _, err := ks.Erase(ctx, erase.Options{}); err != nil {
		t.Fatal(err)
	}
	storetest.RequireNone(t, dir, old)
	if _, err := ks.KeyByNumber(ctx, "t001", 1); err != nil {
		t.Fatalf("the new key after the erase: %v", err)
	}
	if stored(t, ks, keyEntry("t001", 1)) == old {
		t.Fatal("the new key is the old one")
	}
}

// doomChildEnv names the folder a child process of TestDoomKilledBeforeErase
// works in.
const doomChildEnv = "PROGRESSDB_TEST_DOOM_CHILD"

// TestDoomChild is the process TestDoomKilledBeforeErase kills: it fills a
// key store, prints the destroyed and live keys' stored values, destroys
// two threads, says so and waits to be killed.
func TestDoomChild(t *testing.T) {
	dir := os.Getenv(doomChildEnv)
	if dir == "" {
		t.Skip("run by TestDoomKilledBeforeErase")
	}
	ctx := context.Background()
	ks := testOpen(t, dir, Options{Keeper: testKeeper(t, 1)})
	fillThreads(t, ks, 200, 2)
	for _, key := range [][]byte{keyEntry("t010", 1), keyEntry("t150", 2), keyEntry("t011", 1)} {
		fmt.Printf("value %s\n", hex.EncodeToString([]byte(stored(t, ks, key))))
	}
	for _, tid := range []string{"t010", "t150"} {
		if _, err := ks.DestroyThread(ctx, tid); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println("destroyed")
	time.Sleep(time.Minute)
	t.Fatal("not killed")
}

// A process killed with SIGKILL after destroying threads' keys and before
// the erase: the next open finds the debt in the markers, the keys stay
// unreadable, and its erase removes them from every file without erasing
// the whole store.
func TestDoomKilledBeforeErase(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "keys")
	cmd := exec.Command(os.Args[0], "-test.run=^TestDoomChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), doomChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var values []string
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "destroyed" {
		if v, ok := strings.CutPrefix(sc.Text(), "value "); ok {
			b, err := hex.DecodeString(v)
			if err != nil {
				t.Fatal(err)
			}
			values = append(values, string(b))
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if len(values) != 3 {
		t.Fatalf("the child printed %d values, want 3 (did it reach the destroys?)", len(values))
	}
	gone, live := values[:2], values[2]
	storetest.RequireAll(t, dir, gone...)

	ks := testOpen(t, dir, Options{Keeper: testKeeper(t, 1)})
	if _, err := ks.KeyByNumber(ctx, "t010", 1); !errors.Is(err, ErrNoKey) {
		t.Fatalf("a destroyed key after the kill: %v; want ErrNoKey", err)
	}
	if ok, err := ks.Erased(ctx); err != nil || ok {
		t.Fatalf("Erased = %v, %v after the kill; want false", ok, err)
	}
	res, err := ks.Erase(ctx, erase.Options{})
	if err != nil || res.Full || res.Nothing {
		t.Fatalf("Erase after the kill = %+v, %v; want an erase of the two threads only", res, err)
	}
	storetest.RequireNone(t, dir, gone...)
	storetest.RequireAll(t, dir, live)
	if _, err := ks.KeyByNumber(ctx, "t011", 1); err != nil {
		t.Fatalf("a live key after the erase: %v", err)
	}
}

// A key store of the previous release (format 2, and format 1 before
// identities) opens, raises its format on its first thread destroy (so
// that the previous release no longer opens it), and erases: keys it
// destroyed itself and never erased (its own crash) by a full erase,
// those destroyed now by a targeted one.
func TestPreviousFormatErases(t *testing.T) {
	for _, format := range []string{"2", "1"} {
		t.Run("format_"+format, func(t *testing.T) {
			ctx := context.Background()
			dir := filepath.Join(t.TempDir(), "keys")
			k := testKeeper(t, 1)
			ks := testOpen(t, dir, Options{Keeper: k})
			fillThreads(t, ks, 20, 2)
			oldGone := stored(t, ks, keyEntry("t003", 1))
			newGone := stored(t, ks, keyEntry("t012", 2))
			live := stored(t, ks, keyEntry("t013", 1))
			// What the previous release left: its format, and a thread
			// destroyed its way (entries deleted, the erased marker
			// removed) by a process killed before its erase.
			b := ks.db.NewBatch()
			_ = b.Set([]byte(formatKey), []byte(format), nil)
			if format == "1" {
				_ = b.Delete([]byte(idKey), nil)
				_ = b.Delete([]byte(databaseKey), nil)
			}
			for _, key := range [][]byte{keyEntry("t003", 1), keyEntry("t003", 2), nextKey("t003")} {
				_ = b.Delete(key, nil)
			}
			_ = b.Delete([]byte(erasedKey), nil)
			if err := b.Commit(nil); err != nil {
				t.Fatal(err)
			}
			if err := ks.Close(); err != nil {
				t.Fatal(err)
			}

			ks = testOpen(t, dir, Options{Keeper: k})
			if f := stored(t, ks, []byte(formatKey)); f != format {
				t.Fatalf("format %q on open; want %s until a destroy", f, format)
			}
			if _, err := ks.DestroyThread(ctx, "t012"); err != nil {
				t.Fatal(err)
			}
			if f := stored(t, ks, []byte(formatKey)); f != "3" {
				t.Fatalf("format %q after a destroy; want 3", f)
			}
			res, err := ks.Erase(ctx, erase.Options{})
			if err != nil || !res.Full {
				t.Fatalf("Erase = %+v, %v; want a full erase for the previous release's debt", res, err)
			}
			storetest.RequireNone(t, dir, oldGone, newGone)
			storetest.RequireAll(t, dir, live)
			if err := ks.Close(); err != nil {
				t.Fatal(err)
			}
			ks = testOpen(t, dir, Options{Keeper: k})
			if ks.ID() == "" {
				t.Fatal("no identity after the raise to format 3")
			}
			if _, err := ks.KeyByNumber(ctx, "t013", 1); err != nil {
				t.Fatalf("a live key after the reopen: %v", err)
			}
		})
	}
}
