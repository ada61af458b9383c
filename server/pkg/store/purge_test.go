package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

var errStop = errors.New("lease lost")

// failAfter returns a BeforeBatch hook that allows n batches, then fails.
func failAfter(n int) func(context.Context) error {
	calls := 0
	return func(context.Context) error {
		calls++
		if calls > n {
			return errStop
		}
		return nil
	}
}

func beginThreadPurge(t *testing.T, s *store.Store, tid string) {
	t.Helper()
	th, err := s.GetThread(context.Background(), tid)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.BeginPurge(context.Background(), store.PurgeMarker{Kind: store.KindThread, ID: tid, DeletedTS: th.DeletedTS, RunID: "run"}); err != nil {
		t.Fatalf("BeginPurge(%s): %v", tid, err)
	}
}

// fillThread creates tid with n messages, every third edited and every
// fourth deleted.
func fillThread(t *testing.T, s *store.Store, tid string, n int) {
	t.Helper()
	ctx := context.Background()
	createThread(t, s, tid)
	for i := range n {
		mid := fmt.Sprintf("%s-m%d", tid, i)
		appendMessage(t, s, tid, mid, "hello")
		if i%3 == 0 {
			if _, err := s.EditMessage(ctx, tid, mid, []byte(`"edited"`)); err != nil {
				t.Fatal(err)
			}
		}
		if i%4 == 0 {
			deleteMessage(t, s, tid, mid)
		}
	}
}

func TestPurgeThreadLeavesNeighboursByteIdentical(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	for _, tid := range []string{"a", "a-1", "a.b", "ab", "a0", "b"} {
		fillThread(t, s, tid, 6)
	}
	deleteThread(t, s, "a")
	deleteThread(t, s, "ab") // a deleted neighbour keeps its index entry too

	before := rawKeys(t, s, "", "")
	theirs := maps.Clone(before)
	dataKeys := 0
	for k := range before {
		if k == "thread:a:meta" || len(k) > 9 && k[:9] == "thread:a:" || len(k) > 14 && k[:14] == "version:msg:a-" && k[14] == 'm' {
			delete(theirs, k)
			dataKeys++
		}
		if len(k) > 10 && k[:10] == "idx:del:t:" && k[len(k)-2:] == ":a" || len(k) > 10 && k[:10] == "idx:del:m:" && before[k] == "a" ||
			strings.HasPrefix(k, "idx:age:") && before[k] == "a" || strings.HasPrefix(k, "idx:cnt:") && strings.HasSuffix(k, ":a") {
			delete(theirs, k)
		}
	}
	if dataKeys != 1+6+6+2+2+1 { // meta, 6 log entries, 6 first versions, 2 edits, 2 tombstones, live count
		t.Fatalf("thread a has %d data keys, test setup expects 18", dataKeys)
	}

	beginThreadPurge(t, s, "a")
	n, err := s.PurgeThread(ctx, "a", store.PurgeOptions{BatchSize: 4})
	if err != nil || n != dataKeys {
		t.Fatalf("PurgeThread = %d, %v; want %d", n, err, dataKeys)
	}
	after := rawKeys(t, s, "", "")
	delete(after, "sys:purge:t:a") // the runner clears it after its audit record
	if !maps.Equal(after, theirs) {
		for k, v := range after {
			if theirs[k] != v {
				t.Errorf("changed or added: %s = %s", k, v)
			}
		}
		for k := range theirs {
			if _, ok := after[k]; !ok {
				t.Errorf("removed: %s", k)
			}
		}
		t.FailNow()
	}
	if ok, _ := s.ItemExists(ctx, store.KindThread, "a"); ok {
		t.Fatal("ItemExists(a) after purge")
	}
	if ok, _ := s.ItemExists(ctx, store.KindThread, "a-1"); !ok {
		t.Fatal("ItemExists(a-1) is false")
	}
}

func TestPurgeThreadInterruptedAtEveryBatchFinishesLater(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	for stopAfter := 0; stopAfter < 12; stopAfter++ {
		t.Run(fmt.Sprint("after_", stopAfter), func(t *testing.T) {
			s := openStore(t, c)
			fillThread(t, s, "t", 20)
			fillThread(t, s, "u", 2)
			deleteThread(t, s, "t")
			total := len(rawKeys(t, s, "thread:t:", "thread:t;")) + len(rawKeys(t, s, "version:msg:t-m", "version:msg:t-n"))
			others := func() map[string]string {
				m := rawKeys(t, s, "thread:u:", "thread:u;")
				maps.Copy(m, rawKeys(t, s, "version:msg:u-m", "version:msg:u-n"))
				return m
			}
			theirs := others()
			beginThreadPurge(t, s, "t")

			first, err := s.PurgeThread(ctx, "t", store.PurgeOptions{BatchSize: 5, BeforeBatch: failAfter(stopAfter)})
			if err == nil {
				if stopAfter*5 < total {
					t.Fatalf("purge finished in %d batches of 5 keys with %d keys", stopAfter, total)
				}
			} else {
				wantErr(t, err, errStop)
				// Metadata and index entry go last: the thread is still found.
				if _, err := s.GetThread(ctx, "t"); err != nil {
					t.Fatalf("metadata gone after an interrupted purge: %v", err)
				}
				if got := indexEntries(t, s, store.KindThread); len(got) != 1 || got[0].ID != "t" {
					t.Fatalf("thread index after interruption = %+v", got)
				}
				if first > stopAfter*5 {
					t.Fatalf("deleted %d keys in %d batches of 5", first, stopAfter)
				}
			}

			second, err := s.PurgeThread(ctx, "t", store.PurgeOptions{BatchSize: 5})
			if err != nil || first+second != total {
				t.Fatalf("resumed purge = %d, %v; %d + %d != %d keys", second, err, first, second, total)
			}
			if left := rawKeys(t, s, "thread:t:", "thread:t;"); len(left) != 0 {
				t.Fatalf("left under thread:t: %v", left)
			}
			if left := rawKeys(t, s, "version:msg:t-m", "version:msg:t-n"); len(left) != 0 {
				t.Fatalf("versions left: %v", left)
			}
			for _, e := range append(indexEntries(t, s, store.KindThread), indexEntries(t, s, store.KindMessage)...) {
				if e.ThreadID == "t" {
					t.Fatalf("index entry left: %+v", e)
				}
			}
			if !maps.Equal(others(), theirs) {
				t.Fatal("other keys changed")
			}
			// Idempotent: nothing left to do.
			if n, err := s.PurgeThread(ctx, "t", store.PurgeOptions{}); n != 0 || err != nil {
				t.Fatalf("third purge = %d, %v", n, err)
			}
		})
	}
}

func TestPurgeRefusesLiveAndMalformedThreads(t *testing.T) {
	ctx := context.Background()
	s, _ := openLegacy(t, newClock())
	_, err := s.PurgeThread(ctx, storetest.Live, store.PurgeOptions{})
	wantErr(t, err, store.ErrNotEligible)
	_, err = s.PurgeThread(ctx, storetest.BrokenMeta, store.PurgeOptions{})
	wantErr(t, err, store.ErrMalformed)
	_, err = s.PurgeMessage(ctx, storetest.Live, storetest.LiveMessage, store.PurgeOptions{})
	wantErr(t, err, store.ErrNotEligible)
	_, err = s.PurgeMessage(ctx, storetest.Live, storetest.BrokenMessage, store.PurgeOptions{})
	wantErr(t, err, store.ErrMalformed)
	_, err = s.PurgeMessage(ctx, storetest.OldDeleted, storetest.LegacyTombstone, store.PurgeOptions{})
	wantErr(t, err, store.ErrNotEligible)
	if ok, _ := s.ItemExists(ctx, store.KindThread, storetest.Live); !ok {
		t.Fatal("live thread touched")
	}
	// A legacy tombstone (no deleted_ts) is still a tombstone: the runner
	// stamps it first, but the primitive itself may remove it.
	n, err := s.PurgeMessage(ctx, storetest.Live, storetest.LegacyTombstone, store.PurgeOptions{})
	if err != nil || n != 3 {
		t.Fatalf("PurgeMessage(legacy tombstone) = %d, %v; want 3 keys", n, err)
	}
	if got := entryStrings(indexEntries(t, s, store.KindMessage)); fmt.Sprint(got) != "[0:live/live-m4]" {
		t.Fatalf("message index = %v", got)
	}
}

func TestPurgeMessageInterruptedAndResumed(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	// 6 middle versions in 3 batches of 2, then one batch with the first
	// and last versions, the log and the index entry.
	for stopAfter := 0; stopAfter < 4; stopAfter++ {
		t.Run(fmt.Sprint("after_", stopAfter), func(t *testing.T) {
			s := openStore(t, c)
			createThread(t, s, "t")
			appendMessage(t, s, "t", "keep", "x")
			appendMessage(t, s, "t", "m", "x")
			for i := range 6 {
				if _, err := s.EditMessage(ctx, "t", "m", []byte(fmt.Sprint(i))); err != nil {
					t.Fatal(err)
				}
			}
			tomb := deleteMessage(t, s, "t", "m") // 8 versions + 1 log entry
			before := rawKeys(t, s, "", "")
			if err := s.BeginPurge(ctx, store.PurgeMarker{Kind: store.KindMessage, ID: "m", ThreadID: "t", DeletedTS: tomb.DeletedTS}); err != nil {
				t.Fatal(err)
			}
			_, err := s.RestoreMessage(ctx, "t", "m")
			wantErr(t, err, store.ErrPurgeInProgress)

			first, err := s.PurgeMessage(ctx, "t", "m", store.PurgeOptions{BatchSize: 2, BeforeBatch: failAfter(stopAfter)})
			if !errors.Is(err, errStop) {
				t.Fatalf("interrupted purge = %d, %v", first, err)
			}
			if got := indexEntries(t, s, store.KindMessage); len(got) != 1 {
				t.Fatalf("index entry gone before the last batch: %+v", got)
			}
			second, err := s.PurgeMessage(ctx, "t", "m", store.PurgeOptions{BatchSize: 2})
			if err != nil || first+second != 9 {
				t.Fatalf("purge = %d + %d keys, %v; want 9", first, second, err)
			}
			after := rawKeys(t, s, "", "")
			delete(after, "sys:purge:m:m")
			for k := range before {
				if _, ok := after[k]; ok != (k == "sys:schema" || k == "sys:erased" || k == "sys:db:id" || k == "sys:audit:head" || k == "sys:format" ||
					k == "idx:live:t:" || containsAny(k, "keep", "thread:t:meta") ||
					k == "thread:t:count" || strings.HasPrefix(k, "idx:cnt:")) {
					t.Errorf("key %s present=%v after purge", k, ok)
				}
			}
			// schema, format, erase state, identity and audit head, thread
			// meta and live entry, keep's log entry, version and age entry,
			// the thread's live count and its index entry
			if len(after) != 12 {
				t.Fatalf("keys after purge: %v", after)
			}
			if n, err := s.PurgeMessage(ctx, "t", "m", store.PurgeOptions{}); n != 0 || err != nil {
				t.Fatalf("repeated purge = %d, %v", n, err)
			}
		})
	}
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		for i := 0; i+len(sub) <= len(s); i++ {
			if s[i:i+len(sub)] == sub {
				return true
			}
		}
	}
	return false
}

func TestBeginPurgeChecksTheItemAgain(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	createThread(t, s, "t")
	appendMessage(t, s, "t", "m", "x")
	appendMessage(t, s, "t", "live", "x")
	th := deleteThread(t, s, "t")
	tomb := deleteMessage(t, s, "t", "m")
	createThread(t, s, "other")

	cases := []struct {
		name string
		m    store.PurgeMarker
		also error
	}{
		{"wrong deleted_ts", store.PurgeMarker{Kind: store.KindThread, ID: "t", DeletedTS: th.DeletedTS + 1}, nil},
		{"zero deleted_ts", store.PurgeMarker{Kind: store.KindThread, ID: "t"}, nil},
		{"live thread", store.PurgeMarker{Kind: store.KindThread, ID: "other", DeletedTS: th.DeletedTS}, nil},
		{"absent thread", store.PurgeMarker{Kind: store.KindThread, ID: "gone", DeletedTS: 1}, store.ErrNotFound},
		{"live message", store.PurgeMarker{Kind: store.KindMessage, ID: "live", ThreadID: "t", DeletedTS: tomb.DeletedTS}, nil},
		{"message of another thread", store.PurgeMarker{Kind: store.KindMessage, ID: "m", ThreadID: "other", DeletedTS: tomb.DeletedTS}, store.ErrNotFound},
		{"message deleted_ts", store.PurgeMarker{Kind: store.KindMessage, ID: "m", ThreadID: "t", DeletedTS: 7}, nil},
	}
	for _, tc := range cases {
		err := s.BeginPurge(ctx, tc.m)
		if !errors.Is(err, store.ErrNotEligible) || tc.also != nil && !errors.Is(err, tc.also) {
			t.Errorf("%s: BeginPurge = %v", tc.name, err)
		}
	}
	if pending, _ := s.PendingPurges(ctx); len(pending) != 0 {
		t.Fatalf("markers written for refused purges: %+v", pending)
	}
}

func TestPurgeMarkersBlockRestoreAndReuse(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	createThread(t, s, "t")
	appendMessage(t, s, "t", "m", "x")
	appendMessage(t, s, "t", "m2", "x")
	deleteMessage(t, s, "t", "m")
	deleteThread(t, s, "t")
	beginThreadPurge(t, s, "t")

	_, err := s.RestoreThread(ctx, "t")
	wantErr(t, err, store.ErrPurgeInProgress)
	_, err = s.RestoreMessage(ctx, "t", "m")
	wantErr(t, err, store.ErrPurgeInProgress)
	_, err = s.DeleteMessage(ctx, "t", "m2")
	wantErr(t, err, store.ErrPurgeInProgress)

	pending, err := s.PendingPurges(ctx)
	if err != nil || len(pending) != 1 || pending[0].ID != "t" || pending[0].ThreadID != "t" || pending[0].RunID != "run" || pending[0].StartedAt != c.Now().UnixNano() {
		t.Fatalf("PendingPurges = %+v, %v", pending, err)
	}
	if _, err := s.PurgeThread(ctx, "t", store.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// Until the audit record is written and the marker cleared, the IDs
	// stay taken.
	_, err = s.CreateThread(ctx, store.Thread{ID: "t"})
	wantErr(t, err, store.ErrPurgeInProgress)
	_, err = s.RestoreThread(ctx, "t")
	wantErr(t, err, store.ErrPurgeInProgress)

	if err := s.ClearPurges(ctx, pending); err != nil {
		t.Fatal(err)
	}
	if pending, _ := s.PendingPurges(ctx); len(pending) != 0 {
		t.Fatalf("markers after ClearPurges: %+v", pending)
	}
	_, err = s.RestoreThread(ctx, "t")
	wantErr(t, err, store.ErrNotFound)
	createThread(t, s, "t")
	appendMessage(t, s, "t", "m", "reused id after the purge")
}

func TestRestoreRacesBeginPurge(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	for round := range 40 {
		tid := fmt.Sprint("t", round)
		createThread(t, s, tid)
		appendMessage(t, s, tid, "m"+tid, "x")
		th := deleteThread(t, s, tid)

		var wg sync.WaitGroup
		var restoreErr, beginErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, restoreErr = s.RestoreThread(ctx, tid)
		}()
		go func() {
			defer wg.Done()
			beginErr = s.BeginPurge(ctx, store.PurgeMarker{Kind: store.KindThread, ID: tid, DeletedTS: th.DeletedTS})
		}()
		wg.Wait()

		switch {
		case restoreErr == nil && errors.Is(beginErr, store.ErrNotEligible):
			if got, _ := s.GetThread(ctx, tid); got.Deleted {
				t.Fatalf("round %d: restore won but the thread is deleted", round)
			}
		case beginErr == nil && errors.Is(restoreErr, store.ErrPurgeInProgress):
			if _, err := s.RestoreThread(ctx, tid); !errors.Is(err, store.ErrPurgeInProgress) {
				t.Fatalf("round %d: restore after BeginPurge = %v", round, err)
			}
		default:
			t.Fatalf("round %d: restore = %v, begin purge = %v; want exactly one winner", round, restoreErr, beginErr)
		}

		// The same race on a message.
		mid := "m" + tid
		if _, err := s.RestoreThread(ctx, tid); err == nil {
			tomb := deleteMessage(t, s, tid, mid)
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, restoreErr = s.RestoreMessage(ctx, tid, mid)
			}()
			go func() {
				defer wg.Done()
				beginErr = s.BeginPurge(ctx, store.PurgeMarker{Kind: store.KindMessage, ID: mid, ThreadID: tid, DeletedTS: tomb.DeletedTS})
			}()
			wg.Wait()
			if (restoreErr == nil) == (beginErr == nil) ||
				restoreErr != nil && !errors.Is(restoreErr, store.ErrPurgeInProgress) ||
				beginErr != nil && !errors.Is(beginErr, store.ErrNotEligible) {
				t.Fatalf("round %d: restore message = %v, begin purge = %v", round, restoreErr, beginErr)
			}
		}
	}
}

func TestPurgeLargeThreadInBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 40,000 messages")
	}
	// 40,000 messages: their 120,000 keys collected would hold well over
	// the limit below, and the purge's own growth stays far under it.
	const messages = 40_000
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	now := c.Now().UnixNano()

	start := time.Now()
	b := s.NewBulk()
	if err := b.PutThread(store.Thread{ID: "big", Deleted: true, DeletedTS: now, CreatedTS: now}); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"text":"a message of ordinary length, long enough to matter"}`)
	versions := make([]store.Message, 1)
	for i := range messages {
		versions[0] = store.Message{ID: fmt.Sprintf("big-%06d", i), Thread: "big", Author: "ana", Body: body, TS: now + int64(i), Version: 1}
		if err := b.PutMessage(versions); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	fillThread(t, s, "bigger", 3) // a neighbour

	t.Logf("loaded in %v", time.Since(start))
	// Start from a flushed memtable: a flush of what the load left, under
	// way while the purge runs, holds buffers the meter would count as the
	// purge's (the load's age index entries made that likely).
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	heap := newHeapMeter(s)
	base, peak := heap.live(), int64(0)
	batches := 0
	beginThreadPurge(t, s, "big")
	n, err := s.PurgeThread(ctx, "big", store.PurgeOptions{BatchSize: 1000, BeforeBatch: func(context.Context) error {
		batches++
		if batches%20 == 0 {
			peak = max(peak, heap.live()-base)
		}
		return nil
	}})
	t.Logf("purged in %v", time.Since(start))
	if err != nil || n != 2*messages+2 { // a log entry and a version per message, meta, live count
		t.Fatalf("PurgeThread = %d, %v; want %d keys", n, err, 2*messages+2)
	}
	// Collecting the keys (a version, a log entry and an age entry a
	// message, about 70 bytes each with their slice) would take 8 MiB;
	// the purge grows the heap by under 2 MiB.
	const limit = 4 << 20
	t.Logf("live heap growth during the purge: %.1f MiB", float64(peak)/(1<<20))
	if peak > limit {
		t.Fatalf("live heap grew by %.1f MiB during the purge, limit %d MiB", float64(peak)/(1<<20), limit>>20)
	}
	// Each live message's age entry is deleted with it: three keys a message.
	if keys := n + messages; batches < keys/1000 || batches > keys/1000+2 {
		t.Fatalf("%d batches for %d keys of 1000", batches, n)
	}
	if ok, _ := s.ItemExists(ctx, store.KindThread, "big"); ok {
		t.Fatal("keys left after the purge")
	}
	for i := 0; i < messages; i += 997 {
		if ok, _ := s.ItemExists(ctx, store.KindMessage, fmt.Sprintf("big-%06d", i)); ok {
			t.Fatalf("versions of big-%06d left", i)
		}
	}
	if ok, _ := s.ItemExists(ctx, store.KindThread, "bigger"); !ok {
		t.Fatal("neighbour purged")
	}
}

// heapMeter measures the live Go heap less Pebble's memtables and block
// cache. Pebble allocates those outside the Go heap with cgo, on it without
// cgo, and, in race-enabled builds, on one or the other at random per
// process; the meter finds out which at its start, when the 32 MiB memtable
// dwarfs everything else the process holds.
type heapMeter struct {
	s          *store.Store
	pebbleOnGo bool
}

func newHeapMeter(s *store.Store) heapMeter {
	h := heapMeter{s: s}
	live, pebble := h.sample()
	h.pebbleOnGo = live >= pebble
	return h
}

func (h heapMeter) sample() (live, pebble int64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := h.s.DB().Metrics()
	return int64(ms.HeapAlloc), int64(m.MemTable.Size+m.MemTable.ZombieSize) + m.BlockCache.Size
}

func (h heapMeter) live() int64 {
	live, pebble := h.sample()
	if h.pebbleOnGo {
		live -= pebble
	}
	return live
}

// BatchLimit shrinks batches below BatchSize, never grows them, and is
// asked again for every batch.
func TestPurgeBatchLimit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		limit    func(batch int) int
		maxBatch func(batch int) int
	}{
		{"limit below size", func(int) int { return 7 }, func(int) int { return 7 }},
		{"limit above size is ignored", func(int) int { return 5000 }, func(int) int { return 40 }},
		{"zero means BatchSize", func(int) int { return 0 }, func(int) int { return 40 }},
		{"asked per batch", func(b int) int { return 5 + 20*(b%2) }, func(b int) int { return 5 + 20*(b%2) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := openStore(t, newClock())
			fillThread(t, s, "t", 60)
			deleteThread(t, s, "t")
			beginThreadPurge(t, s, "t")

			// Keys left before each commit; their differences are the batches.
			var left []int
			n, err := s.PurgeThread(ctx, "t", store.PurgeOptions{
				BatchSize:  40,
				BatchLimit: func() int { return tc.limit(len(left)) },
				BeforeBatch: func(context.Context) error {
					left = append(left, dataKeys(t, s))
					return nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			left = append(left, dataKeys(t, s))
			if left[len(left)-1] != 0 || n == 0 {
				t.Fatalf("purge deleted %d keys and left %d", n, left[len(left)-1])
			}
			full := 0
			for b := range len(left) - 1 {
				size := left[b] - left[b+1]
				if size <= 0 || size > tc.maxBatch(b) {
					t.Fatalf("batch %d deleted %d keys, want 1 to %d (keys left before each: %v)", b, size, tc.maxBatch(b), left)
				}
				if size >= tc.maxBatch(b)-3 {
					full++ // a batch closes early only to keep a message's last keys together
				}
			}
			if full < (len(left)-1)/2 {
				t.Fatalf("batches far below their limit: keys left before each: %v", left)
			}
		})
	}
}

// dataKeys counts the keys a purge deletes (everything but markers).
func dataKeys(t *testing.T, s *store.Store) int {
	t.Helper()
	it, err := s.DB().NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if !strings.HasPrefix(string(it.Key()), "sys:") {
			n++
		}
	}
	return n
}

// A hold set on a live thread after the runner found one of its deleted
// messages must still win: BeginPurge checks the thread's hold under the
// thread's lock, the same lock SetLegalHold takes.
func TestBeginPurgeMessageRefusedUnderThreadHold(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	createThread(t, s, "held")
	appendMessage(t, s, "held", "m1", "keep me")
	m := deleteMessage(t, s, "held", "m1")
	if _, err := s.SetLegalHold(ctx, "held", true); err != nil {
		t.Fatal(err)
	}
	marker := store.PurgeMarker{Kind: store.KindMessage, ID: "m1", ThreadID: "held", DeletedTS: m.DeletedTS, RunID: "run"}
	wantErr(t, s.BeginPurge(ctx, marker), store.ErrNotEligible)
	if pending, err := s.PendingPurges(ctx); err != nil || len(pending) != 0 {
		t.Fatalf("purge markers after a refused begin: %v, %v", pending, err)
	}

	// Released, the message may go.
	if _, err := s.SetLegalHold(ctx, "held", false); err != nil {
		t.Fatal(err)
	}
	if err := s.BeginPurge(ctx, marker); err != nil {
		t.Fatalf("BeginPurge after the hold was lifted: %v", err)
	}
}
