package replica

import (
	"errors"
	"slices"
	"testing"
)

// sizesOf serves EntrySizes from sizes of entries first, first+1, …
func sizesOf(first uint64, sizes []uint64) func(lo, hi uint64) ([]uint64, error) {
	return func(lo, hi uint64) ([]uint64, error) {
		if lo < first || hi > first+uint64(len(sizes)) || lo > hi {
			return nil, errors.New("out of the log")
		}
		return slices.Clone(sizes[lo-first : hi-first]), nil
	}
}

// The byte bound's decision: nothing under the bound; past it, the
// newest half of the bound stays, or all that the slowest live follower
// lacks when that fits in the bound; a follower lacking more is left to
// a snapshot.
func TestLogBytesTrimTo(t *testing.T) {
	mib := uint64(1 << 20)
	chunks := func(n int) []uint64 { // a small entry, then n upload chunks
		s := []uint64{100}
		for range n {
			s = append(s, mib)
		}
		return s
	}
	cases := []struct {
		name    string
		sizes   []uint64 // entries 11, 12, …
		max     uint64
		slowest uint64
		want    uint64
	}{
		{"under the bound", chunks(4), 8 * mib, 0, 0},
		{"at the bound", []uint64{4 * mib, 4 * mib}, 8 * mib, 0, 0},
		{"past it, no follower known", chunks(10), 8 * mib, 0, 17},
		{"followers caught up", chunks(10), 8 * mib, 21, 17},
		{"a follower within the bound", chunks(10), 8 * mib, 14, 14},
		{"a follower just within the bound", chunks(10), 8 * mib, 13, 13},
		{"a follower beyond the bound", chunks(10), 8 * mib, 12, 17},
		{"one entry bigger than half", []uint64{100, 5 * mib, 5 * mib}, 8 * mib, 0, 13},
		{"no bound", chunks(10), 0, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b logBytes
			last := 10 + uint64(len(tc.sizes))
			if err := b.sync(11, last, sizesOf(11, tc.sizes)); err != nil {
				t.Fatal(err)
			}
			asked := false
			got := b.trimTo(tc.max, func() uint64 { asked = true; return tc.slowest })
			if got != tc.want {
				t.Errorf("trimTo = %d, want %d", got, tc.want)
			}
			if got != 0 && tc.want <= last && b.after(got) > tc.max {
				t.Errorf("%d bytes stay after %d, over the bound %d", b.after(got), got, tc.max)
			}
			if tc.want == 0 && asked {
				t.Error("the followers were asked for while the log is under the bound")
			}
		})
	}
}

// The sizes follow the log: noted as entries apply, dropped with the
// entries a truncation drops, read from the log after a restart or when
// a snapshot moves the log's start past them.
func TestLogBytesFollowTheLog(t *testing.T) {
	log := []uint64{1, 2, 3, 4, 5, 6, 7, 8} // entries 1..8
	var b logBytes
	b.note(1, 1) // before any load: read from the log instead
	if err := b.sync(1, 3, sizesOf(1, log)); err != nil {
		t.Fatal(err)
	}
	if b.total != 6 || b.from != 1 {
		t.Fatalf("after the first load: from %d total %d", b.from, b.total)
	}
	b.note(4, 4)
	b.note(6, 6) // a gap: read from the log by the next sync
	if err := b.sync(3, 6, sizesOf(1, log)); err != nil {
		t.Fatal(err)
	}
	if b.from != 3 || b.total != 3+4+5+6 {
		t.Fatalf("after a truncation to 2: from %d total %d", b.from, b.total)
	}
	if err := b.sync(8, 8, sizesOf(1, log)); err != nil { // a snapshot at 7
		t.Fatal(err)
	}
	if b.from != 8 || b.total != 8 {
		t.Fatalf("after a snapshot at 7: from %d total %d", b.from, b.total)
	}
	if err := b.sync(8, 9, sizesOf(1, log)); err == nil {
		t.Fatal("entries past the log were read")
	}
	if b.from != 0 || b.total != 0 {
		t.Fatalf("a failed read left from %d total %d: the next sync must read again", b.from, b.total)
	}
}
