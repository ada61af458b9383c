package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// Past maxEraseSpans, spans collapse into one per namespace that still
// covers every span added.
func TestEraseSpansCollapse(t *testing.T) {
	var e EraseSpans
	for i := range maxEraseSpans + 2 {
		e.addThread(fmt.Sprintf("t%07d", i))
		if i%2 == 0 {
			e.addMessage(fmt.Sprintf("m%07d", i))
		}
	}
	if e.Len() != 2 {
		t.Fatalf("spans after collapse = %d, want 2 (one per namespace)", e.Len())
	}
	for _, sp := range e.spans {
		switch string(sp.Start) {
		case "thread:t0000000:":
			if want := fmt.Sprintf("thread:t%07d;", maxEraseSpans+1); string(sp.End) != want {
				t.Fatalf("thread span ends at %s, want %s", sp.End, want)
			}
		case "version:msg:m0000000:":
			if want := fmt.Sprintf("version:msg:m%07d;", maxEraseSpans); string(sp.End) != want {
				t.Fatalf("version span ends at %s, want %s", sp.End, want)
			}
		default:
			t.Fatalf("unexpected span %s..%s", sp.Start, sp.End)
		}
	}
}

// Overlapping spans merge, and so do spans with almost no data between them.
func TestMergeSpans(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var e EraseSpans
	e.addThread("b")
	e.addThread("a")
	e.addThread("b")
	e.addMessage("m1")
	got := s.mergeSpans(&e)
	if len(got) != 1 || string(got[0].Start) != "thread:a:" || string(got[0].End) != "version:msg:m1;" {
		t.Fatalf("merged = %q", got)
	}
	if s.mergeSpans(nil) != nil || s.mergeSpans(&EraseSpans{}) != nil {
		t.Fatal("no spans must give no ranges")
	}
}

// Spans with a table's worth of data between them stay apart: merging them
// would rewrite that data for nothing.
func TestMergeSpansKeepsApartAcrossData(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Random values: compression must not shrink the data in between.
	rng := rand.New(rand.NewPCG(1, 2))
	value := make([]byte, 4<<10)
	b := s.db.NewBatch()
	for i := range (2 * eraseGapMerge) / len(value) {
		for j := range value {
			value[j] = byte(rng.Uint32())
		}
		_ = b.Set([]byte(fmt.Sprintf("thread:m%07d:meta", i)), value, nil)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Compact(context.Background(), []byte("thread:"), []byte("thread;"), false); err != nil {
		t.Fatal(err)
	}
	var e EraseSpans
	e.addThread("a")
	e.addThread("b")
	e.addThread("z")
	got := s.mergeSpans(&e)
	if len(got) != 2 || string(got[0].Start) != "thread:a:" || string(got[0].End) != "thread:b;" ||
		string(got[1].Start) != "thread:z:" {
		t.Fatalf("merged = %q, want a..b and z apart", got)
	}
}
