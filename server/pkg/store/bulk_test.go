package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// TestBulkWritesWhatTheAPIWrites builds the same data through the API and
// through Bulk and compares the raw databases.
func TestBulkWritesWhatTheAPIWrites(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	api := openStore(t, c)
	for i := range 4 {
		tid := fmt.Sprint("t", i)
		fillThread(t, api, tid, 5)
		c.Advance(time.Minute)
		if i%2 == 1 {
			deleteThread(t, api, tid)
		}
	}
	if _, err := api.RestoreMessage(ctx, "t0", "t0-m4"); err != nil {
		t.Fatal(err)
	}

	bulkStore := openStore(t, c)
	b := bulkStore.NewBulk()
	threads, _, err := api.ListThreads(ctx, store.ListOptions{IncludeDeleted: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range threads {
		if err := b.PutThread(th); err != nil {
			t.Fatal(err)
		}
		msgs, _, err := api.ListMessages(ctx, th.ID, store.ListOptions{IncludeDeleted: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			versions, err := api.ListVersions(ctx, th.ID, m.ID)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.PutMessage(versions); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	want, got := rawKeys(t, api, "", ""), rawKeys(t, bulkStore, "", "")
	// Every database has an identity of its own.
	delete(want, "sys:db:id")
	delete(got, "sys:db:id")
	if !maps.Equal(want, got) {
		for k, v := range want {
			if got[k] != v {
				t.Errorf("API wrote %s = %s; bulk wrote %q", k, v, got[k])
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("bulk wrote extra key %s", k)
			}
		}
	}
}

func TestBulkRejectsBadInput(t *testing.T) {
	s := openStore(t, newClock())
	b := s.NewBulk()
	cases := map[string][]store.Message{
		"no versions":       nil,
		"bad id":            {{ID: "a:b", Thread: "t"}},
		"bad thread":        {{ID: "m", Thread: ""}},
		"mixed ids":         {{ID: "m", Thread: "t"}, {ID: "n", Thread: "t"}},
		"mixed threads":     {{ID: "m", Thread: "t"}, {ID: "m", Thread: "u"}},
		"version order":     {{ID: "m", Thread: "t", Version: 2}, {ID: "m", Thread: "t", Version: 1}},
		"invalid body":      {{ID: "m", Thread: "t", Body: json.RawMessage(`{`)}},
		"two bodies in one": {{ID: "m", Thread: "t", Body: json.RawMessage(`1 2`)}},
	}
	for name, versions := range cases {
		if err := b.PutMessage(versions); err == nil {
			t.Errorf("%s: PutMessage accepted %+v", name, versions)
		}
	}
	if err := b.PutThread(store.Thread{ID: "a b"}); err == nil {
		t.Error("PutThread accepted an invalid ID")
	}
	if err := b.PutRaw([]byte("thread:raw:meta"), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.PutRaw([]byte("k"), nil); err == nil {
		t.Error("PutRaw after Close succeeded")
	}
	if err := b.Close(); err == nil {
		t.Error("second Close succeeded")
	}
	if got := rawKeys(t, s, "thread:", "thread;"); len(got) != 1 || got["thread:raw:meta"] != "not json" {
		t.Fatalf("keys after bulk load: %v", got)
	}
}

// BenchmarkBulkLoad measures seeding: one message per op, two versions,
// every tenth message deleted.
func BenchmarkBulkLoad(b *testing.B) {
	s := openStore(b, newClock())
	bulk := s.NewBulk()
	body := json.RawMessage(`{"text":"a message of ordinary length for a chat, a sentence or so"}`)
	versions := make([]store.Message, 2)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tid := fmt.Sprintf("t%05d", i/100)
		if i%100 == 0 {
			if err := bulk.PutThread(store.Thread{ID: tid, Title: "seed", Author: "ana", CreatedTS: 1, UpdatedTS: 1}); err != nil {
				b.Fatal(err)
			}
		}
		mid := fmt.Sprintf("m%08d", i)
		versions[0] = store.Message{ID: mid, Thread: tid, Author: "ana", Body: body, TS: int64(i), Version: 1}
		versions[1] = versions[0]
		versions[1].Version, versions[1].TS = 2, int64(i)+1
		if i%10 == 0 {
			versions[1].Body, versions[1].Deleted, versions[1].DeletedTS = nil, true, int64(i)+1
		}
		if err := bulk.PutMessage(versions); err != nil {
			b.Fatal(err)
		}
	}
	if err := bulk.Close(); err != nil {
		b.Fatal(err)
	}
}
