package seed

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/store"
)

var testNow = time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)

const day = 24 * time.Hour

func openStore(t *testing.T) *store.Store {
	t.Helper()
	s, err := store.Open(t.TempDir(), store.Options{Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return s
}

func smallOptions() Options {
	return Options{
		Threads:    20,
		Messages:   10,
		Versions:   3,
		Deleted:    0.25,
		DeletedAge: 40 * day,
		LegalHold:  0.2,
		Seed:       7,
		Now:        testNow,
	}
}

func TestRunCounts(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	st, err := Run(ctx, s, smallOptions())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}

	// 5 of 20 threads deleted; 5% of the 150 messages of live threads
	// tombstoned (7); every message has 3 versions, tombstones one more.
	want := Stats{
		Prefix:             "s7",
		Threads:            20,
		DeletedThreads:     5,
		LegalHolds:         st.LegalHolds,
		Messages:           200,
		Versions:           200*3 + 7,
		TombstonedMessages: 7,
		Keys:               20 + 5 + 200 + (200*3 + 7) + 7 + 20, // ... and every thread's live count
		Elapsed:            st.Elapsed,
	}
	if st != want {
		t.Errorf("stats:\n got %+v\nwant %+v", st, want)
	}

	threads := listThreads(t, s)
	if len(threads) != 20 {
		t.Fatalf("ListThreads found %d threads, want 20", len(threads))
	}
	deletedFrom := testNow.Add(-40*day - time.Hour).UnixNano()
	deletedTo := testNow.Add(-40 * day).UnixNano()
	var deleted, holds, tombstones int64
	for _, th := range threads {
		if !strings.HasPrefix(th.ID, "s7-t") || th.Title == "" || th.Author == "" {
			t.Errorf("thread %+v", th)
		}
		if th.LegalHold {
			holds++
		}
		msgs := listMessages(t, s, th.ID)
		if len(msgs) != 10 {
			t.Errorf("thread %s has %d messages, want 10", th.ID, len(msgs))
		}
		if th.Deleted {
			deleted++
			if th.DeletedTS <= deletedFrom || th.DeletedTS > deletedTo {
				t.Errorf("thread %s deleted at %v, want within an hour before Now-40d", th.ID, time.Unix(0, th.DeletedTS).UTC())
			}
		}
		last := th.CreatedTS
		for _, m := range msgs {
			if m.Deleted {
				tombstones++
				if th.Deleted {
					t.Errorf("message %s of deleted thread %s is tombstoned", m.ID, th.ID)
				}
				if m.DeletedTS <= deletedFrom || m.DeletedTS > deletedTo {
					t.Errorf("message %s deleted at %v", m.ID, time.Unix(0, m.DeletedTS).UTC())
				}
			}
			last = checkVersions(t, s, th, m, last)
		}
		if th.Deleted && last >= th.DeletedTS {
			t.Errorf("thread %s has activity at %d after its deletion at %d", th.ID, last, th.DeletedTS)
		}
	}
	if deleted != st.DeletedThreads || holds != st.LegalHolds || tombstones != st.TombstonedMessages {
		t.Errorf("read back %d deleted, %d holds, %d tombstones; stats say %d, %d, %d",
			deleted, holds, tombstones, st.DeletedThreads, st.LegalHolds, st.TombstonedMessages)
	}

	// The deletion index sees the same items.
	for kind, want := range map[store.ItemKind]int64{store.KindThread: 5, store.KindMessage: 7} {
		var n int64
		err := s.ScanDeletionIndex(ctx, kind, 0, testNow.UnixNano(), func(store.DeletionEntry) error { n++; return nil })
		if err != nil || n != want {
			t.Errorf("deletion index %s: %d entries, %v; want %d", kind, n, err, want)
		}
	}

	// Keys counts what is in the database under the data namespaces.
	if n := countKeys(t, s, "thread:", "version:msg:", "idx:del:"); n != st.Keys {
		t.Errorf("database holds %d keys, stats say %d", n, st.Keys)
	}
}

// checkVersions checks one message's versions (numbered, time-ordered after
// prev, JSON bodies) and returns the time of its last live version.
func checkVersions(t *testing.T, s *store.Store, th store.Thread, m store.Message, prev int64) int64 {
	t.Helper()
	vs, err := s.ListVersions(context.Background(), th.ID, m.ID)
	if err != nil {
		t.Fatalf("ListVersions %s: %v", m.ID, err)
	}
	wantN := 3
	if m.Deleted {
		wantN = 4
	}
	if len(vs) != wantN {
		t.Fatalf("message %s has %d versions, want %d", m.ID, len(vs), wantN)
	}
	for i, v := range vs {
		if v.Version != int64(i+1) || v.Thread != th.ID || v.ID != m.ID {
			t.Errorf("version %d of %s: %+v", i+1, m.ID, v)
		}
		if v.TS < prev {
			t.Errorf("version %d of %s at %d, before %d", i+1, m.ID, v.TS, prev)
		}
		prev = v.TS
		if v.Deleted {
			if i != len(vs)-1 {
				t.Errorf("tombstone of %s is not the last version", m.ID)
			}
			continue
		}
		var b struct{ Text string }
		if err := json.Unmarshal(v.Body, &b); err != nil || b.Text == "" {
			t.Errorf("version %d of %s body %s: %v", i+1, m.ID, v.Body, err)
		}
		if v.TS < th.CreatedTS {
			t.Errorf("version %d of %s predates its thread", i+1, m.ID)
		}
	}
	if m.Deleted {
		return vs[len(vs)-2].TS
	}
	return prev
}

func TestRunDeterministic(t *testing.T) {
	a, b, c := openStore(t), openStore(t), openStore(t)
	o := smallOptions()
	for _, s := range []*store.Store{a, b} {
		if _, err := Run(context.Background(), s, o); err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	if da, db := dump(t, a), dump(t, b); !reflect.DeepEqual(da, db) {
		t.Error("the same seed gave different data")
	}

	o.Seed = 8
	o.Prefix = "s7" // same IDs, other content
	if _, err := Run(context.Background(), c, o); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if reflect.DeepEqual(dump(t, a), dump(t, c)) {
		t.Error("seeds 7 and 8 gave the same data")
	}
}

func TestRepeatedSeedsDoNotCollide(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	o := smallOptions()
	o.Threads = 3

	var prefixes []string
	for range 3 {
		st, err := Run(ctx, s, o)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		prefixes = append(prefixes, st.Prefix)
	}
	if got := strings.Join(prefixes, ","); got != "s7,s7.2,s7.3" {
		t.Errorf("prefixes %s, want s7,s7.2,s7.3", got)
	}
	if n := len(listThreads(t, s)); n != 9 {
		t.Errorf("%d threads after three seeds of 3, want 9", n)
	}

	o.Prefix = "s7.2"
	if _, err := Run(ctx, s, o); !errors.Is(err, ErrPrefixInUse) {
		t.Errorf("explicit used prefix: err = %v, want ErrPrefixInUse", err)
	}
	o.Prefix = "demo"
	if st, err := Run(ctx, s, o); err != nil || st.Prefix != "demo" {
		t.Errorf("explicit new prefix: %+v, %v", st, err)
	}
}

func TestProgress(t *testing.T) {
	s := openStore(t)
	clock := testNow
	o := smallOptions()
	o.Clock = func() time.Time { clock = clock.Add(100 * time.Millisecond); return clock }
	var reports []Progress
	o.Progress = func(p Progress) { reports = append(reports, p) }

	st, err := Run(context.Background(), s, o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	// 220 items, one clock reading each: a report every 10 items or so.
	if len(reports) < 15 {
		t.Fatalf("%d reports, want about one per simulated second", len(reports))
	}
	for i, p := range reports {
		if p.Total != 220 {
			t.Errorf("report %d: total %d, want 220", i, p.Total)
		}
		if i == 0 {
			continue
		}
		prev := reports[i-1]
		if p.Done < prev.Done {
			t.Errorf("report %d: done went from %d to %d", i, prev.Done, p.Done)
		}
		// Only the final report may follow the previous one within a second.
		if i < len(reports)-1 && p.Elapsed-prev.Elapsed < time.Second {
			t.Errorf("report %d came %v after the previous one", i, p.Elapsed-prev.Elapsed)
		}
	}
	mid := reports[len(reports)/2]
	if mid.Rate <= 0 || mid.ETA <= 0 || mid.Done >= mid.Total {
		t.Errorf("mid-run report %+v, want a rate and an ETA", mid)
	}
	wantETA := time.Duration(float64(mid.Total-mid.Done) / mid.Rate * float64(time.Second))
	if mid.ETA != wantETA {
		t.Errorf("ETA %v, want %v", mid.ETA, wantETA)
	}
	final := reports[len(reports)-1]
	if final.Done != 220 || final.ETA != 0 || final.Elapsed != st.Elapsed {
		t.Errorf("final report %+v, stats elapsed %v", final, st.Elapsed)
	}
}

func TestCancelKeepsWholeThreads(t *testing.T) {
	s := openStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := testNow
	o := smallOptions()
	o.Clock = func() time.Time { clock = clock.Add(time.Second); return clock }
	o.Progress = func(p Progress) {
		if p.Done >= 50 {
			cancel()
		}
	}

	st, err := Run(ctx, s, o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: err = %v, want context.Canceled", err)
	}
	if st.Threads == 0 || st.Threads == 20 {
		t.Fatalf("stopped after %d threads, want part of the 20", st.Threads)
	}
	threads := listThreads(t, s)
	if int64(len(threads)) != st.Threads {
		t.Errorf("%d threads stored, stats say %d", len(threads), st.Threads)
	}
	for _, th := range threads {
		if n := len(listMessages(t, s, th.ID)); n != 10 {
			t.Errorf("thread %s has %d messages, want all 10", th.ID, n)
		}
	}
}

func TestInvalidOptions(t *testing.T) {
	s := openStore(t)
	for _, o := range []Options{
		{Threads: -1},
		{Threads: 1, Deleted: 1.5},
		{Threads: 1, LegalHold: -0.1},
		{Threads: 1, DeletedMessages: 2},
		{Threads: 1, DeletedAge: -time.Hour},
		{Threads: 1, Prefix: "bad:prefix"},
		{Threads: 1, Prefix: strings.Repeat("p", 120)},
	} {
		if _, err := Run(context.Background(), s, o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Run(%+v): err = %v, want ErrInvalidOptions", o, err)
		}
	}
}

func TestNoTombstonesWhenNegative(t *testing.T) {
	s := openStore(t)
	o := smallOptions()
	o.DeletedMessages = -1
	st, err := Run(context.Background(), s, o)
	if err != nil || st.TombstonedMessages != 0 {
		t.Errorf("stats %+v, err %v; want no tombstones", st, err)
	}
}

func TestEvenly(t *testing.T) {
	for _, f := range []float64{0, 0.05, 0.1, 0.25, 1.0 / 3, 0.5, 1} {
		var n int64
		for i := int64(1); i <= 1000; i++ {
			if evenly(i, f) {
				n++
			}
		}
		if want := int64(1000 * f); n != want {
			t.Errorf("evenly(%v) chose %d of 1000, want %d", f, n, want)
		}
	}
}

type threadDump struct {
	Thread   store.Thread
	Versions [][]store.Message
}

func dump(t *testing.T, s *store.Store) []threadDump {
	t.Helper()
	var out []threadDump
	for _, th := range listThreads(t, s) {
		d := threadDump{Thread: th}
		for _, m := range listMessages(t, s, th.ID) {
			vs, err := s.ListVersions(context.Background(), th.ID, m.ID)
			if err != nil {
				t.Fatal(err)
			}
			d.Versions = append(d.Versions, vs)
		}
		out = append(out, d)
	}
	return out
}

func listThreads(t *testing.T, s *store.Store) []store.Thread {
	t.Helper()
	var all []store.Thread
	o := store.ListOptions{Limit: 7, IncludeDeleted: true} // several pages
	for {
		page, next, err := s.ListThreads(context.Background(), o)
		if err != nil {
			t.Fatalf("ListThreads: %v", err)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		o.Cursor = next
	}
}

func listMessages(t *testing.T, s *store.Store, tid string) []store.Message {
	t.Helper()
	var all []store.Message
	o := store.ListOptions{Limit: 1000, IncludeDeleted: true}
	for {
		page, next, err := s.ListMessages(context.Background(), tid, o)
		if err != nil {
			t.Fatalf("ListMessages %s: %v", tid, err)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		o.Cursor = next
	}
}

func countKeys(t *testing.T, s *store.Store, prefixes ...string) int64 {
	t.Helper()
	var n int64
	for _, p := range prefixes {
		it, err := s.DB().NewIter(&pebble.IterOptions{LowerBound: []byte(p), UpperBound: append([]byte(p[:len(p)-1]), ';')})
		if err != nil {
			t.Fatal(err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// BenchmarkRun reports the seeding rate in messages per second.
func BenchmarkRun(b *testing.B) {
	o := Options{Threads: 100, Messages: 100, Versions: 2, Deleted: 0.1, DeletedAge: 40 * day, Seed: 1, Now: testNow}
	for b.Loop() {
		b.StopTimer()
		s, err := store.Open(b.TempDir(), store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := Run(context.Background(), s, o); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(o.Threads*o.Messages)*float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
