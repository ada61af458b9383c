package store

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkAppendProbes times, one by one, the reads an append makes
// before its commit, on a database of 1,000 threads × 100 messages
// compacted into sstables (as an old database is): the thread's metadata,
// the version range probe and the purge marker probe of a new message ID.
// The last two are what AppendMessage skips for IDs it generates.
func BenchmarkAppendProbes(b *testing.B) {
	ctx := context.Background()
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	bulk := s.NewBulk()
	body := json.RawMessage(`{"text":"a benchmark message"}`)
	for t := range 1000 {
		tid := fmt.Sprintf("t%04d", t)
		if err := bulk.PutThread(Thread{ID: tid, Title: "bench", Author: "bench", CreatedTS: 1}); err != nil {
			b.Fatal(err)
		}
		for m := range 100 {
			mid := fmt.Sprintf("%s-m%03d", tid, m)
			if err := bulk.PutMessage([]Message{{ID: mid, Thread: tid, Author: "bench", Body: body, TS: int64(m + 1)}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := bulk.Close(); err != nil {
		b.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		b.Fatal(err)
	}
	ids := make([]string, 4096)
	for i := range ids {
		ids[i] = s.NewID()
	}

	b.Run("thread_read", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := s.liveThread(fmt.Sprintf("t%04d", i%1000)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("version_range_probe", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			mid := ids[i%len(ids)]
			if used, err := s.hasRange(versionPrefix(mid), versionEnd(mid)); err != nil || used {
				b.Fatal(used, err)
			}
		}
	})
	b.Run("purge_marker_probe", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if used, err := s.purgeStarted(KindMessage, ids[i%len(ids)]); err != nil || used {
				b.Fatal(used, err)
			}
		}
	})
	b.Run("append_generated_id", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := s.AppendMessage(ctx, fmt.Sprintf("t%04d", i%1000), Message{Author: "a", Body: body}); err != nil {
				b.Fatal(err)
			}
		}
	})
	// Each round (-count) needs IDs the rounds before it did not take.
	round := 0
	b.Run("append_client_id", func(b *testing.B) {
		round++
		for i := 0; b.Loop(); i++ {
			id := fmt.Sprintf("c%03d-%08d", round, i)
			if _, err := s.AppendMessage(ctx, fmt.Sprintf("t%04d", i%1000), Message{ID: id, Author: "a", Body: body}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAppendVsRawCommit sets one append against a raw synced commit
// of the same two keys, one writer: what the store adds to the fsync.
func BenchmarkAppendVsRawCommit(b *testing.B) {
	ctx := context.Background()
	s := benchOneThread(b)
	body := json.RawMessage(`{"text":"a benchmark message"}`)
	b.Run("raw_commit_sync", func(b *testing.B) {
		for b.Loop() {
			if err := rawAppend(s, body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("append", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.AppendMessage(ctx, "t", Message{Author: "a", Body: body}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAppendOneThreadParallel: 64 writers on one thread, through the
// store and as raw synced commits of the same keys; with group commit the
// store should stay near the raw rate.
func BenchmarkAppendOneThreadParallel(b *testing.B) {
	ctx := context.Background()
	s := benchOneThread(b)
	body := json.RawMessage(`{"text":"a benchmark message"}`)
	b.Run("raw_commit_sync", func(b *testing.B) {
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := rawAppend(s, body); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("append", func(b *testing.B) {
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.AppendMessage(ctx, "t", Message{Author: "a", Body: body}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// benchOneThread opens a store with one thread, "t".
func benchOneThread(b *testing.B) *Store {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	if _, err := s.CreateThread(context.Background(), Thread{ID: "t", Title: "bench", Author: "bench"}); err != nil {
		b.Fatal(err)
	}
	return s
}

// rawAppend commits the two keys of an append to thread "t" with a plain
// synced commit: no read, no lock, no index.
func rawAppend(s *Store, body json.RawMessage) error {
	m := Message{ID: s.NewID(), Thread: "t", Author: "a", Body: body, TS: s.now().UnixNano(), Version: 1}
	bt := s.db.NewBatch()
	putVersion(bt, m)
	_ = bt.Set(logKey("t", m.TS, m.ID), []byte(m.ID), nil)
	return s.apply(context.Background(), write{kind: writeState, batch: bt, sync: true})
}
