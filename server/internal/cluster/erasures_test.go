package cluster

import (
	"bytes"
	"context"
	"errors"
	"reflect"
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
	t.Parallel()
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

// Completed erasures' records leave etcd Keep after completion, by
// PruneErasures or by every node's worker, which wakes when the next one
// falls due; open ones stay. A pruned erasure's status is rebuilt from the
// parts its shards keep, as the record gave it.
func TestErasureRecordsPruned(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := srv.Client(t)
	k := Keys{Name: "chat"}
	receiptKey := bytes.Repeat([]byte{7}, 32)
	requested := time.Now().Add(-2 * time.Hour).UTC()
	record := func(author string) ErasureRecord {
		rec, err := NewErasureRecord(receiptKey, retention.NewErasureID(), author, 1, requested)
		if err != nil {
			t.Fatal(err)
		}
		if err := RecordErasure(ctx, c, k, rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	// part is shard 0's own status, as its owner answers it.
	part := func(rec ErasureRecord, at time.Time) retention.ErasureStatus {
		return retention.ErasureStatus{ErasureID: rec.ID, Status: retention.ErasureCompleted, Subject: rec.Subject,
			RequestedAt: wire.Nanos(rec.RequestedAt), CompletedAt: wire.At(at), KeysDestroyed: 3, VersionsPurged: 4,
			MessagesPurged: 2, HeldThreads: []string{"t-held"}, RunIDs: []string{"r1"}}
	}
	complete := func(rec ErasureRecord, at time.Time) {
		if _, err := ShardErased(ctx, c, k, rec.ID, 0, part(rec, at)); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(rec ErasureRecord) bool {
		_, _, err := ReadErasure(ctx, c, k, rec.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	old, recent, open := record("old"), record("recent"), record("open")
	oldAt := time.Now().Add(-time.Hour)
	complete(old, oldAt)
	complete(recent, time.Now())
	stored, _, err := ReadErasure(ctx, c, k, old.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := PruneErasures(ctx, c, k, time.Now().Add(-30*time.Minute)); err != nil || n != 1 {
		t.Fatalf("PruneErasures = %d, %v; want the one completed an hour ago", n, err)
	}
	if exists(old) || !exists(recent) || !exists(open) {
		t.Fatalf("after pruning: old %t, recent %t, open %t; want only old gone", exists(old), exists(recent), exists(open))
	}
	rebuilt, known := RecordFromShards(old.ID, 1, map[int]retention.ErasureStatus{0: part(old, oldAt)})
	if !known || rebuilt.Open() {
		t.Fatalf("rebuilt from its shard: %+v, known %t", rebuilt, known)
	}
	was, now := stored.Status(nil), rebuilt.Status(nil)
	if !reflect.DeepEqual(was, now) {
		t.Fatalf("status rebuilt from the shard:\n%+v\nwant the record's:\n%+v", now, was)
	}
	if _, known := RecordFromShards(old.ID, 1, nil); known {
		t.Fatal("an erasure no shard knows was rebuilt")
	}
	// A shard without its part keeps the rebuilt erasure running.
	two, _ := RecordFromShards(old.ID, 2, map[int]retention.ErasureStatus{1: part(old, oldAt)})
	if st := two.Status(nil); st.Status != retention.ErasureRunning || st.Shards[0].Status != retention.ErasurePending {
		t.Fatalf("one of two shards known: %+v", st)
	}

	// The worker: nothing but the next record falling due wakes it (its
	// retry is an hour away), and the open record stays.
	if err := CreateCluster(ctx, c, k, 1, []string{"node-a"}); err != nil {
		t.Fatal(err)
	}
	owner, err := StartOwner(ctx, OwnerOptions{Client: c, Keys: k, Node: "node-a", Owner: "node-a/1", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(owner.Close)
	due := record("due")
	complete(due, time.Now())
	w := StartErasureWorker(ctx, ErasureWorkerOptions{Client: c, Keys: k, Owner: owner, ReceiptKey: receiptKey,
		Service: func(int) retention.ShardEraser { return nil }, Retry: time.Hour, Keep: time.Second})
	defer w.Close()
	for exists(recent) || exists(due) {
		select {
		case <-ctx.Done():
			t.Fatalf("the worker left completed records: recent %t, due %t", exists(recent), exists(due))
		case <-time.After(20 * time.Millisecond):
		}
	}
	if !exists(open) {
		t.Fatal("the worker pruned an open erasure")
	}
}
