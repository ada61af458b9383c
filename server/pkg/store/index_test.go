package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

func openLegacy(t *testing.T, c *clock) (*store.Store, string) {
	t.Helper()
	dir := t.TempDir()
	storetest.LoadFixture(t, dir, storetest.LegacyFixture())
	return openAt(t, dir, c), dir
}

func entryStrings(es []store.DeletionEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%d:%s/%s", e.DeletedTS, e.ThreadID, e.ID))
	}
	return out
}

func TestLegacyFixtureBuildsIndexOnOpen(t *testing.T) {
	ctx := context.Background()
	s, dir := openLegacy(t, newClock())

	threads := entryStrings(indexEntries(t, s, store.KindThread))
	wantThreads := []string{
		"0:broken-meta/broken-meta",
		"0:legacy-no-ts/legacy-no-ts",
		"0:legacy-zero-ts/legacy-zero-ts",
		fmt.Sprintf("%d:old-deleted/old-deleted", storetest.OldDeletedTS),
		fmt.Sprintf("%d:future-deleted/future-deleted", storetest.FutureDeletedTS),
	}
	if fmt.Sprint(threads) != fmt.Sprint(wantThreads) {
		t.Fatalf("thread index = %v\nwant %v", threads, wantThreads)
	}
	messages := entryStrings(indexEntries(t, s, store.KindMessage))
	if want := []string{"0:live/live-m3", "0:live/live-m4"}; fmt.Sprint(messages) != fmt.Sprint(want) {
		t.Fatalf("message index = %v, want %v", messages, want)
	}

	// Malformed records are reported, live data reads as usual.
	_, err := s.GetThread(ctx, storetest.BrokenMeta)
	wantErr(t, err, store.ErrMalformed)
	_, err = s.GetMessage(ctx, storetest.Live, storetest.BrokenMessage)
	wantErr(t, err, store.ErrMalformed)
	th, err := s.GetThread(ctx, storetest.LegacyNoTS)
	if err != nil || !th.Deleted || th.DeletedTS != 0 {
		t.Fatalf("legacy thread = %+v, %v", th, err)
	}
	msgs, _, err := s.ListMessages(ctx, storetest.Live, store.ListOptions{IncludeDeleted: true})
	if err != nil || len(msgs) != 3 {
		t.Fatalf("ListMessages(live) = %d messages, %v; want 3 (the broken one left out)", len(msgs), err)
	}
	if msgs[1].ID != storetest.EditedMessage || string(msgs[1].Body) != `{"text":"edited"}` {
		t.Fatalf("edited message listed as %+v", msgs[1])
	}

	// The schema marker stops a second rebuild: an entry removed by hand
	// stays removed across a reopen.
	if err := s.DB().Delete([]byte("idx:del:t:00000000000000000000:broken-meta"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, dir, newClock())
	if got := len(indexEntries(t, s, store.KindThread)); got != 4 {
		t.Fatalf("after reopen the thread index has %d entries, want 4 (no rebuild)", got)
	}
	n, err := s.RebuildDeletionIndex(ctx)
	if err != nil || n != 7 {
		t.Fatalf("RebuildDeletionIndex = %d, %v; want 7", n, err)
	}
	if got := len(indexEntries(t, s, store.KindThread)); got != 5 {
		t.Fatalf("after rebuild the thread index has %d entries, want 5", got)
	}
}

// TestRebuildMatchesIndexWrittenByWrites is the store's consistency check:
// the indexes the writes keep (deletion index, live-thread index) are
// exactly what a rebuild from the data finds, after creates, deletes,
// restores and purges.
func TestRebuildMatchesIndexWrittenByWrites(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	for i := range 6 {
		tid := fmt.Sprint("t", i)
		createThread(t, s, tid)
		for j := range 3 {
			appendMessage(t, s, tid, fmt.Sprintf("m%d-%d", i, j), "x")
		}
		c.Advance(time.Minute)
		deleteMessage(t, s, tid, fmt.Sprintf("m%d-1", i))
		if i%2 == 0 {
			deleteThread(t, s, tid)
		}
	}
	// A restore, a thread deleted and restored twice, a purged thread.
	if _, err := s.RestoreThread(ctx, "t2"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		deleteThread(t, s, "t3")
		if _, err := s.RestoreThread(ctx, "t3"); err != nil {
			t.Fatal(err)
		}
	}
	th, err := s.GetThread(ctx, "t4")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.BeginPurge(ctx, store.PurgeMarker{Kind: store.KindThread, ID: "t4", DeletedTS: th.DeletedTS}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PurgeThread(ctx, "t4", store.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	checkIndexesRebuildAlike(t, s)

	live := rawKeys(t, s, "idx:live:", "idx:live;")
	if want := "map[idx:live:t1:: idx:live:t2:: idx:live:t3:: idx:live:t5::]"; fmt.Sprint(live) != want {
		t.Fatalf("live-thread index = %v, want %s", live, want)
	}
}

// checkIndexesRebuildAlike rebuilds the indexes and fails unless the result
// is byte for byte what the writes had left.
func checkIndexesRebuildAlike(t testing.TB, s *store.Store) {
	t.Helper()
	before := indexKeys(t, s)
	dels := rawKeys(t, s, "idx:del:", "idx:del;")
	n, err := s.RebuildDeletionIndex(context.Background())
	if err != nil || n != len(dels) {
		t.Fatalf("rebuild = %d, %v; deletion index had %d entries", n, err, len(dels))
	}
	if after := indexKeys(t, s); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("rebuilt indexes differ:\n%v\n%v", after, before)
	}
}

// indexKeys returns every index key (idx:) and every thread's live count
// (thread:<tid>:count), the bookkeeping the writes keep and a rebuild
// recomputes.
func indexKeys(t testing.TB, s *store.Store) map[string]string {
	t.Helper()
	out := rawKeys(t, s, "idx:", "idx;")
	for k, v := range rawKeys(t, s, "thread:", "thread;") {
		if strings.HasSuffix(k, ":count") {
			out[k] = v
		}
	}
	return out
}

// TestOpenBuildsLiveThreadIndexOfOlderDatabase: a database whose schema
// predates the live-thread index (sys:schema "1") gets it built once at
// open, since operators upgrade in place.
func TestOpenBuildsLiveThreadIndexOfOlderDatabase(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	dir := t.TempDir()
	s := openAt(t, dir, c)
	for _, id := range []string{"a", "b", "c"} {
		createThread(t, s, id)
	}
	deleteThread(t, s, "b")
	// What a database of the previous version holds: no live-thread index.
	db := s.DB()
	if err := db.DeleteRange([]byte("idx:live:"), []byte("idx:live;"), nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("sys:schema"), []byte("1"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, dir, c)
	got, _, err := s.ListThreads(ctx, store.ListOptions{})
	if err != nil || len(got) != 2 || got[0].ID != "a" || got[1].ID != "c" {
		t.Fatalf("ListThreads after upgrade = %+v, %v", got, err)
	}
	if v := rawKeys(t, s, "sys:schema", "sys:schema\x00")["sys:schema"]; v != "4" {
		t.Fatalf("sys:schema = %q after open, want 4", v)
	}
	checkIndexesRebuildAlike(t, s)
}

func TestStampDeletion(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s, _ := openLegacy(t, c)
	now := c.Now().UnixNano()
	thread := func(id string) store.DeletionEntry {
		return store.DeletionEntry{Kind: store.KindThread, ID: id, ThreadID: id}
	}
	message := func(id string) store.DeletionEntry {
		return store.DeletionEntry{Kind: store.KindMessage, ID: id, ThreadID: storetest.Live}
	}

	for _, id := range []string{storetest.LegacyNoTS, storetest.LegacyZeroTS} {
		if err := s.StampDeletion(ctx, thread(id), now, "run"); err != nil {
			t.Fatalf("stamp %s: %v", id, err)
		}
		th, err := s.GetThread(ctx, id)
		if err != nil || !th.Deleted || th.DeletedTS != now {
			t.Fatalf("stamped thread = %+v, %v", th, err)
		}
	}
	if err := s.StampDeletion(ctx, message(storetest.LegacyTombstone), now, "run"); err != nil {
		t.Fatal(err)
	}
	versions, err := s.ListVersions(ctx, storetest.Live, storetest.LegacyTombstone)
	if err != nil || len(versions) != 2 || versions[1].DeletedTS != now || !versions[1].Deleted {
		t.Fatalf("stamped message versions = %+v, %v (want the tombstone rewritten in place)", versions, err)
	}

	stamps, err := s.PendingStamps(ctx)
	if err != nil || len(stamps) != 3 {
		t.Fatalf("stamp markers = %+v, %v; want one per stamp", stamps, err)
	}
	for _, m := range stamps {
		if m.DeletedTS != now || m.RunID != "run" {
			t.Errorf("stamp marker %+v: want deleted_ts %d and run \"run\"", m, now)
		}
	}
	if err := s.ClearStamps(ctx, stamps); err != nil {
		t.Fatal(err)
	}
	if stamps, err := s.PendingStamps(ctx); err != nil || len(stamps) != 0 {
		t.Fatalf("stamp markers after ClearStamps = %+v, %v", stamps, err)
	}

	threads := entryStrings(indexEntries(t, s, store.KindThread))
	want := []string{
		"0:broken-meta/broken-meta",
		fmt.Sprintf("%d:old-deleted/old-deleted", storetest.OldDeletedTS),
		fmt.Sprintf("%d:legacy-no-ts/legacy-no-ts", now),
		fmt.Sprintf("%d:legacy-zero-ts/legacy-zero-ts", now),
		fmt.Sprintf("%d:future-deleted/future-deleted", storetest.FutureDeletedTS),
	}
	if fmt.Sprint(threads) != fmt.Sprint(want) {
		t.Fatalf("thread index = %v\nwant %v", threads, want)
	}
	messages := entryStrings(indexEntries(t, s, store.KindMessage))
	if want := []string{"0:live/live-m4", fmt.Sprintf("%d:live/live-m3", now)}; fmt.Sprint(messages) != fmt.Sprint(want) {
		t.Fatalf("message index = %v, want %v", messages, want)
	}

	notEligible := []struct {
		name      string
		e         store.DeletionEntry
		malformed bool
	}{
		{"already stamped", thread(storetest.LegacyNoTS), false},
		{"has deleted_ts", thread(storetest.FutureDeleted), false},
		{"live thread", thread(storetest.Live), false},
		{"absent thread", thread("nobody"), false},
		{"broken metadata", thread(storetest.BrokenMeta), true},
		{"live message", message(storetest.LiveMessage), false},
		{"stamped message", message(storetest.LegacyTombstone), false},
		{"broken message", message(storetest.BrokenMessage), true},
		{"message of another thread", store.DeletionEntry{Kind: store.KindMessage, ID: storetest.LegacyTombstone, ThreadID: storetest.OldDeleted}, false},
	}
	for _, tc := range notEligible {
		err := s.StampDeletion(ctx, tc.e, now+1, "run")
		if !errors.Is(err, store.ErrNotEligible) || errors.Is(err, store.ErrMalformed) != tc.malformed {
			t.Errorf("%s: StampDeletion = %v", tc.name, err)
		}
	}
	err = s.StampDeletion(ctx, thread(storetest.LegacyNoTS), 0, "run")
	wantErr(t, err, store.ErrInvalidArgument)
}

func TestScanDeletionIndexRangeAndStop(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	var times []int64
	for i := range 6 {
		tid := fmt.Sprint("t", i)
		createThread(t, s, tid)
		times = append(times, deleteThread(t, s, tid).DeletedTS)
		c.Advance(time.Hour)
	}
	restored := "t3"
	if _, err := s.RestoreThread(ctx, restored); err != nil {
		t.Fatal(err)
	}
	// Garbage in the index is skipped, not reported.
	for _, k := range []string{"idx:del:t:garbage", "idx:del:t:00000000000000000005:bad id", "idx:del:t:0000000000000000000x:t9"} {
		if err := s.DB().Set([]byte(k), nil, nil); err != nil {
			t.Fatal(err)
		}
	}

	scan := func(from, to int64) []string {
		var ids []string
		err := s.ScanDeletionIndex(ctx, store.KindThread, from, to, func(e store.DeletionEntry) error {
			ids = append(ids, e.ID)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	cases := []struct {
		from, to int64
		want     string
	}{
		{0, 1<<63 - 1, "[t0 t1 t2 t4 t5]"},
		{times[1], times[4], "[t1 t2 t4]"},
		{times[1] + 1, times[4] - 1, "[t2]"},
		{-5, times[0], "[t0]"},
		{times[5] + 1, 1<<63 - 1, "[]"},
		{times[4], times[1], "[]"},
	}
	for _, tc := range cases {
		if got := fmt.Sprint(scan(tc.from, tc.to)); got != tc.want {
			t.Errorf("scan [%d, %d] = %s, want %s", tc.from, tc.to, got, tc.want)
		}
	}

	var seen int
	err := s.ScanDeletionIndex(ctx, store.KindThread, 0, 1<<63-1, func(store.DeletionEntry) error {
		seen++
		return store.ErrStopScan
	})
	if err != nil || seen != 1 {
		t.Fatalf("ErrStopScan: err %v after %d entries", err, seen)
	}
	boom := errors.New("boom")
	err = s.ScanDeletionIndex(ctx, store.KindThread, 0, 1<<63-1, func(store.DeletionEntry) error { return boom })
	wantErr(t, err, boom)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	err = s.ScanDeletionIndex(cancelled, store.KindThread, 0, 1<<63-1, func(store.DeletionEntry) error { return nil })
	wantErr(t, err, context.Canceled)
	err = s.ScanDeletionIndex(ctx, "bogus", 0, 1, func(store.DeletionEntry) error { return nil })
	wantErr(t, err, store.ErrInvalidArgument)
}

func TestScanAllowsPurgingDuringTheScan(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	for i := range 50 {
		tid := fmt.Sprintf("t%02d", i)
		createThread(t, s, tid)
		appendMessage(t, s, tid, "m"+tid, "x")
		deleteThread(t, s, tid)
	}
	purged := 0
	err := s.ScanDeletionIndex(ctx, store.KindThread, 0, 1<<63-1, func(e store.DeletionEntry) error {
		if err := s.BeginPurge(ctx, store.PurgeMarker{Kind: e.Kind, ID: e.ID, DeletedTS: e.DeletedTS}); err != nil {
			return err
		}
		if _, err := s.PurgeThread(ctx, e.ID, store.PurgeOptions{BatchSize: 1}); err != nil {
			return err
		}
		purged++
		return nil
	})
	if err != nil || purged != 50 {
		t.Fatalf("purged %d threads during the scan, err %v", purged, err)
	}
	if left := rawKeys(t, s, "thread:", "thread;"); len(left) != 0 {
		t.Fatalf("keys left: %v", left)
	}
	if left := rawKeys(t, s, "idx:", "idx;"); len(left) != 0 {
		t.Fatalf("index entries left: %v", left)
	}
}
