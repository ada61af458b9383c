package attachments

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A sweep effect removes, on each replica but the one that proposed it,
// the uploads' temporary files written before its cutoff, except those
// of the uploads it keeps (under way on the leader); blobs, young
// leftovers and other files stay. A malformed sweep is refused.
func TestReplicaSweepRemovesOldLeftovers(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	old := now.Add(-25 * time.Hour)
	files := map[string]time.Time{
		"t1/m1/01OLD.0011223344556677.tmp":    old, // goes
		"t1/m2/01OLDTOO.8899aabbccddeeff.tmp": old, // kept by the second sweep
		"t1/m1/01YOUNG.0011223344556677.tmp":  now,
		"t1/m1/01KEPT.0011223344556677.tmp":   old, // its upload is under way
		"t1/m1/01BLOB":                        old,
		"t1/m1/notes.txt":                     old, // not the product's
	}
	for name, at := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	sweep := sweepEffect{proposer: 7, cutoff: now.Add(-24 * time.Hour), keep: []string{"t1/m1/01KEPT"}}
	ctx := context.Background()
	left := func() map[string]bool {
		out := map[string]bool{}
		for name := range files {
			if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(name))); err == nil {
				out[name] = true
			}
		}
		return out
	}

	// The proposer's own folder is its sweep's: nothing goes. The next
	// sweep keeps 01OLDTOO: had the first walked, it would be gone.
	self := uint64(7)
	done := make(chan int, 2)
	logger := slog.New(slog.DiscardHandler)
	fx := replicaEffects(dir, func() uint64 { return self }, logger,
		&sweeper{dir: dir, logger: logger, done: func(n int, err error) {
			if err != nil {
				t.Error(err)
			}
			done <- n
		}})
	if err := fx(ctx, blobEffect{op: opSweep, data: sweep.encode()}.encode()); err != nil {
		t.Fatal(err)
	}
	self = 8
	sweep.keep = append(sweep.keep, "t1/m2/01OLDTOO")
	if err := fx(ctx, blobEffect{op: opSweep, data: sweep.encode()}.encode()); err != nil {
		t.Fatal(err)
	}
	if n := <-done; n != 1 {
		t.Fatalf("the first walk removed %d files, want 1", n)
	}
	if got := left(); len(got) != len(files)-1 || !got["t1/m2/01OLDTOO.8899aabbccddeeff.tmp"] {
		t.Fatalf("left %v, want all but the old leftover the second sweep does not keep", got)
	}

	for _, bad := range []blobEffect{
		{op: opSweep, name: "t1/m1/01OLD.0011223344556677.tmp", data: sweep.encode()},
		{op: opSweep, data: sweepEffect{cutoff: now, keep: []string{"../x/y"}}.encode()},
		{op: opSweep, data: sweepEffect{cutoff: now, keep: []string{"t1/m1/01OLD.0011223344556677.tmp"}}.encode()},
		{op: opSweep},
	} {
		if err := fx(ctx, bad.encode()); !errors.Is(err, ErrEffect) {
			t.Errorf("sweep %q keeping %q: %v, want ErrEffect", bad.name, bad.data, err)
		}
	}
}
