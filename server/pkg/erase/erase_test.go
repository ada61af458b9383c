package erase_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/progressdb/progressdb/server/pkg/erase"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// A deleted value is in the database's files until Run erases its span;
// the live value beside it stays readable and stays on disk.
func TestRunErasesDeletedSpan(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := pebble.Open(dir, &pebble.Options{FS: erase.NoRecycleFS{FS: vfs.Default}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range 100 {
		if err := db.Set(fmt.Appendf(nil, "a:%03d", i), fmt.Appendf(nil, "GoneValueQ7%03d", i), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Set([]byte("b:keep"), []byte("KeptValueW4"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteRange([]byte("a:"), []byte("a;"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	storetest.RequireAll(t, dir, "GoneValueQ7050", "KeptValueW4")

	var steps []string
	spans := erase.Merge(db, []erase.Span{{Start: []byte("a:050"), End: []byte("a;")}, {Start: []byte("a:"), End: []byte("a:060")}}, erase.GapMerge)
	if len(spans) != 1 || string(spans[0].Start) != "a:" || string(spans[0].End) != "a;" {
		t.Fatalf("merged = %q, want one span a:..a;", spans)
	}
	res, err := erase.Run(ctx, db, dir, spans, erase.Options{Progress: func(p erase.Progress) {
		if len(steps) == 0 || steps[len(steps)-1] != p.Step {
			steps = append(steps, p.Step)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ranges != 1 {
		t.Fatalf("ranges = %d, want 1", res.Ranges)
	}
	if want := fmt.Sprint([]string{erase.WaitReaders, erase.Compact, erase.RotateLogs, erase.RemoveFiles}); fmt.Sprint(steps) != want {
		t.Fatalf("steps = %v, want %v", steps, want)
	}
	storetest.RequireNone(t, dir, "GoneValueQ7")
	storetest.RequireAll(t, dir, "KeptValueW4")
	v, closer, err := db.Get([]byte("b:keep"))
	if err != nil || string(v) != "KeptValueW4" {
		t.Fatalf("live value = %q, %v", v, err)
	}
	closer.Close()
}
