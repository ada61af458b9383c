package cluster

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// TestErasureRecordLifecycle: a cluster's erasure is one etcd record with
// the author sealed under the receipt key; shards completing together
// each land their part (compare-and-swap), and the last one's write
// completes it and takes the author out of etcd.
func TestErasureRecordLifecycle(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := srv.Client(t)
	k := Keys{Name: "chat"}
	receiptKey := bytes.Repeat([]byte{7}, 32)
	const shards = 4
	es := &Erasures{Client: c, Keys: k, ReceiptKey: receiptKey, Shards: shards,
		Pause: &Pause{Client: c, Keys: k}}

	rec, err := es.Request(ctx, "alice@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if err := RecordErasure(ctx, c, k, rec); err == nil {
		t.Fatal("an erasure ID recorded twice")
	}
	raw, err := c.Get(ctx, k.Erasure(rec.ID))
	if err != nil || len(raw.Kvs) != 1 {
		t.Fatalf("record: %v %v", raw, err)
	}
	if bytes.Contains(raw.Kvs[0].Value, []byte("alice")) {
		t.Fatalf("the author is in clear in etcd: %s", raw.Kvs[0].Value)
	}
	got, err := es.Read(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := keystore.OpenAuthor(receiptKey, rec.ID, got.Author); err != nil || a != "alice@example.com" {
		t.Fatalf("author: %q %v", a, err)
	}
	if got.Subject != keystore.SubjectOf(receiptKey, "alice@example.com") {
		t.Fatalf("subject %s", got.Subject)
	}
	if st := got.Status(nil); st.Status != retention.ErasurePending || len(st.Shards) != shards {
		t.Fatalf("new erasure: %+v", st)
	}
	if _, err := es.Read(ctx, "0000000000000000"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown erasure: %v", err)
	}

	// Three shards complete together; one is still running.
	var wg sync.WaitGroup
	for n := range shards - 1 {
		wg.Go(func() {
			done := retention.ErasureStatus{Status: retention.ErasureCompleted, KeysDestroyed: int64(n + 1),
				MessagesPurged: 10, CompletedAt: wire.Nanos(int64(1000 + n)), HeldThreads: []string{}}
			if _, err := ShardErased(ctx, c, k, rec.ID, n, done); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	open, _, err := OpenErasures(ctx, c, k, func(err error) { t.Error(err) })
	if err != nil || len(open) != 1 || len(open[0].Done) != shards-1 {
		t.Fatalf("open erasures: %+v %v", open, err)
	}
	st := open[0].Status(map[int]retention.ErasureStatus{shards - 1: {Status: retention.ErasureRunning, KeysDestroyed: 5}})
	if st.Status != retention.ErasureRunning || st.KeysDestroyed != 1+2+3+5 || st.MessagesPurged != 30 ||
		st.Shards[shards-1].Status != retention.ErasureRunning || !st.CompletedAt.IsZero() {
		t.Fatalf("running: %+v", st)
	}
	// Without its owner's answer the last shard is pending.
	if st := open[0].Status(nil); st.Status != retention.ErasureRunning || st.Shards[shards-1].Status != retention.ErasurePending {
		t.Fatalf("a shard without owner: %+v", st)
	}

	last := retention.ErasureStatus{Status: retention.ErasureCompleted, KeysDestroyed: 4, MessagesPurged: 10,
		CompletedAt: wire.Nanos(5000), HeldThreads: []string{"t-held"}}
	after, err := ShardErased(ctx, c, k, rec.ID, shards-1, last)
	if err != nil {
		t.Fatal(err)
	}
	if after.Open() || after.Author != nil || after.CompletedAt != 5000 {
		t.Fatalf("completed record: %+v", after)
	}
	// A repeat (a worker that died before it saw its write) changes nothing.
	if again, err := ShardErased(ctx, c, k, rec.ID, shards-1, last); err != nil || again.CompletedAt != 5000 {
		t.Fatalf("repeated: %+v %v", again, err)
	}
	open, _, err = OpenErasures(ctx, c, k, func(err error) { t.Error(err) })
	if err != nil || len(open) != 0 {
		t.Fatalf("open after completion: %+v %v", open, err)
	}
	final, err := es.Read(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	st = final.Status(nil)
	if st.Status != retention.ErasureCompleted || st.KeysDestroyed != 10 || st.MessagesPurged != 40 ||
		len(st.HeldThreads) != 1 || st.CompletedAt.UnixNano() != 5000 {
		t.Fatalf("completed: %+v", st)
	}

	// A paused cluster records nothing, as a paused node does.
	if _, err := es.Pause.Set(ctx, true, "maintenance"); err != nil {
		t.Fatal(err)
	}
	if _, err := es.Request(ctx, "bob"); !errors.Is(err, retention.ErrPaused) {
		t.Fatalf("request while paused: %v", err)
	}
}
