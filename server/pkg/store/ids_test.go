package store

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestValidateID(t *testing.T) {
	cases := []struct {
		name string
		id   string
		ok   bool
	}{
		{"letters", "abc", true},
		{"digit first", "0abc", true},
		{"all allowed", "A-b_c.9", true},
		{"one char", "x", true},
		{"128 chars", strings.Repeat("a", 128), true},
		{"129 chars", strings.Repeat("a", 129), false},
		{"empty", "", false},
		{"colon", "a:b", false},
		{"slash", "a/b", false},
		{"space", "a b", false},
		{"semicolon", "a;b", false},
		{"non-ASCII", "caf\u00e9", false},
		{"NUL", "a\x00", false},
		{"dash first", "-a", false},
		{"dot first", ".a", false},
		{"underscore first", "_a", false},
		{"dot dot", "..", false},
		{"trailing newline", "a\n", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateID(tc.id)
			if tc.ok {
				if err != nil {
					t.Fatalf("ValidateID(%q) = %v, want nil", tc.id, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("ValidateID(%q) = %v, want ErrInvalidID", tc.id, err)
			}
			if !strings.Contains(err.Error(), idRule) {
				t.Fatalf("error %q does not name the rule %s", err, idRule)
			}
		})
	}
}

func TestNewIDValidSortedUnique(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	g := newIDGen(func() time.Time { return now })
	var ids []string
	for i := range 5000 {
		if i%1000 == 999 {
			now = now.Add(time.Millisecond) // a few new milliseconds, many within one
		}
		ids = append(ids, g.next())
	}
	for _, id := range ids {
		if err := ValidateID(id); err != nil {
			t.Fatalf("generated id %q: %v", id, err)
		}
		if len(id) != 26 {
			t.Fatalf("generated id %q has %d chars, want 26", id, len(id))
		}
	}
	if !slices.IsSorted(ids) {
		t.Fatal("generated ids are not in increasing order")
	}
	if len(slices.Compact(slices.Clone(ids))) != len(ids) {
		t.Fatal("generated ids repeat")
	}
}

func TestNewIDFollowsTimeAndSurvivesClockStepBack(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	g := newIDGen(func() time.Time { return now })
	a := g.next()
	now = now.Add(-time.Hour) // clock steps back
	b := g.next()
	now = now.Add(2 * time.Hour)
	c := g.next()
	if !(a < b && b < c) {
		t.Fatalf("ids not increasing: %s %s %s", a, b, c)
	}
	// Two generators (two stores) at different times sort by time.
	later := newIDGen(func() time.Time { return now.Add(time.Second) }).next()
	if !(c < later) {
		t.Fatalf("id from a later millisecond %s sorts before %s", later, c)
	}
	// The first 10 characters are the millisecond timestamp (1740830400000).
	if a[:10] != "01JN8S7QG0" {
		t.Fatalf("timestamp part of %s = %s", a, a[:10])
	}
}

// An IDSource (a cluster node picks a new thread's ID before it knows the
// store) makes IDs like a store's: valid, increasing, unique.
func TestIDSource(t *testing.T) {
	src := NewIDSource()
	var ids []string
	for range 1000 {
		id := src.Next()
		if err := ValidateID(id); err != nil || len(id) != 26 {
			t.Fatalf("id %q: %v", id, err)
		}
		ids = append(ids, id)
	}
	if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
		t.Fatal("ids not increasing and unique")
	}
}
