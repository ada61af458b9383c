package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// benchDeletedTS is the deletion time of the benchmarks' deleted threads.
var benchDeletedTS = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// benchBulkThread writes one thread with messages*versions versions
// through Bulk and returns the number of keys it holds.
func benchBulkThread(b *testing.B, bulk *store.Bulk, tid string, deleted bool, deletedTS int64, messages, versions int) int {
	b.Helper()
	t := store.Thread{ID: tid, Title: "bench", Author: "bench", CreatedTS: 1, UpdatedTS: 1}
	if deleted {
		t.Deleted, t.DeletedTS, t.UpdatedTS = true, deletedTS, deletedTS
	}
	if err := bulk.PutThread(t); err != nil {
		b.Fatal(err)
	}
	body := json.RawMessage(`{"text":"a benchmark message of a realistic length, about a sentence or two"}`)
	vs := make([]store.Message, versions)
	for m := range messages {
		mid := fmt.Sprintf("%s-m%07d", tid, m)
		for v := range vs {
			vs[v] = store.Message{ID: mid, Thread: tid, Author: "bench", Body: body,
				TS: int64(1 + m*versions + v), Version: int64(v + 1)}
		}
		if err := bulk.PutMessage(vs); err != nil {
			b.Fatal(err)
		}
	}
	return 1 + messages*(1+versions)
}

func benchOpen(b *testing.B) *store.Store {
	b.Helper()
	st, err := store.Open(b.TempDir(), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}

// BenchmarkPurgeThread purges one soft-deleted thread per iteration with the
// default batch size; the thread is written (untimed) just before.
func BenchmarkPurgeThread(b *testing.B) {
	for _, sh := range []struct{ messages, versions int }{{10, 2}, {500, 3}, {10000, 1}} {
		b.Run(fmt.Sprintf("messages=%d/versions=%d", sh.messages, sh.versions), func(b *testing.B) {
			ctx := context.Background()
			st := benchOpen(b)
			var keys int64
			i := 0
			for b.Loop() {
				b.StopTimer()
				tid := fmt.Sprintf("t%07d", i)
				i++
				bulk := st.NewBulk()
				benchBulkThread(b, bulk, tid, true, benchDeletedTS, sh.messages, sh.versions)
				if err := bulk.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				n, err := st.PurgeThread(ctx, tid, store.PurgeOptions{})
				if err != nil {
					b.Fatal(err)
				}
				keys += int64(n)
			}
			b.ReportMetric(float64(keys)/b.Elapsed().Seconds(), "keys/s")
		})
	}
}

// BenchmarkScanDeletionIndex scans the thread deletion index. "all" visits
// every entry; "due10" asks for the 10 oldest entries of a large index,
// which is what a run does when few items are due: its cost should not
// depend on the size of the index.
func BenchmarkScanDeletionIndex(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		ctx := context.Background()
		st := benchOpen(b)
		bulk := st.NewBulk()
		for i := range n {
			benchBulkThread(b, bulk, fmt.Sprintf("t%07d", i), true, benchDeletedTS+int64(i)*int64(time.Second), 0, 0)
		}
		if err := bulk.Close(); err != nil {
			b.Fatal(err)
		}
		if err := st.DB().Flush(); err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct {
			name string
			to   int64
			want int
		}{
			{"all", benchDeletedTS + int64(n)*int64(time.Second), n},
			{"due10", benchDeletedTS + 9*int64(time.Second), 10},
		} {
			b.Run(fmt.Sprintf("index=%d/%s", n, c.name), func(b *testing.B) {
				for b.Loop() {
					got := 0
					err := st.ScanDeletionIndex(ctx, store.KindThread, 0, c.to, func(store.DeletionEntry) error {
						got++
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
					if got != c.want {
						b.Fatalf("scanned %d entries, want %d", got, c.want)
					}
				}
				b.ReportMetric(float64(c.want), "entries/op")
			})
		}
	}
}
