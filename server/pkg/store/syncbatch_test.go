package store_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// Group commit's batch sizes: a lone writer's every fsync carries its one
// write; concurrent writers' fsyncs carry every write between them, and
// the histogram's buckets add up.
func TestCommitBatchesCountEveryWriteOnce(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	if b := s.CommitBatches(); b.Count != 0 || b.Sum != 0 {
		t.Fatalf("a store just opened has batches %+v", b)
	}
	createThread(t, s, "t1")
	body := json.RawMessage(`{"text":"hi"}`)
	const lone = 20
	for range lone {
		if _, err := s.AppendMessage(ctx, "t1", store.Message{Author: "ana", Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	b := s.CommitBatches()
	if b.Sum != lone+1 || b.Count != lone+1 || b.Buckets[0] != lone+1 {
		t.Fatalf("one writer: batches %+v, want %d fsyncs of one write each", b, lone+1)
	}

	const writers, each = 16, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := s.AppendMessage(ctx, "t1", store.Message{Author: "ana", Body: body}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	after := s.CommitBatches()
	if got := after.Sum - b.Sum; got != writers*each {
		t.Fatalf("%d concurrent writes counted as %d", writers*each, got)
	}
	syncs := after.Count - b.Count
	if syncs < 1 || syncs > writers*each {
		t.Fatalf("%d writes in %d fsyncs", writers*each, syncs)
	}
	for i := 1; i < len(after.Buckets); i++ {
		if after.Buckets[i] < after.Buckets[i-1] {
			t.Fatalf("buckets not cumulative: %v", after.Buckets)
		}
	}
	if last := after.Buckets[len(after.Buckets)-1]; last != after.Count {
		t.Fatalf("largest bucket %d, count %d (no batch can exceed %d writers)", last, after.Count, writers)
	}
	t.Logf("%d writes from %d writers in %d fsyncs", writers*each, writers, syncs)
}
