package store

import (
	"fmt"
	"testing"
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
		switch string(sp.start) {
		case "thread:t0000000:":
			if want := fmt.Sprintf("thread:t%07d;", maxEraseSpans+1); string(sp.end) != want {
				t.Fatalf("thread span ends at %s, want %s", sp.end, want)
			}
		case "version:msg:m0000000:":
			if want := fmt.Sprintf("version:msg:m%07d;", maxEraseSpans); string(sp.end) != want {
				t.Fatalf("version span ends at %s, want %s", sp.end, want)
			}
		default:
			t.Fatalf("unexpected span %s..%s", sp.start, sp.end)
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
	if len(got) != 1 || string(got[0].start) != "thread:a:" || string(got[0].end) != "version:msg:m1;" {
		t.Fatalf("merged = %q", got)
	}
	if s.mergeSpans(nil) != nil || s.mergeSpans(&EraseSpans{}) != nil {
		t.Fatal("no spans must give no ranges")
	}
}
