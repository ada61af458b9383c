package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// recordSink keeps what a content read streams, as a readable transcript.
type recordSink struct{ lines []string }

func (r *recordSink) Thread(raw []byte) error {
	r.lines = append(r.lines, "thread "+string(raw))
	return nil
}

func (r *recordSink) Message(mid string) error {
	r.lines = append(r.lines, "message "+mid)
	return nil
}

func (r *recordSink) Version(raw []byte) error {
	r.lines = append(r.lines, "version "+string(raw))
	return nil
}

// storedContent is the transcript a content read must produce, built from
// the raw keys: the metadata, then each message (in list order) with its
// stored versions in key order.
func storedContent(t *testing.T, s *store.Store, tid string, mids []string) []string {
	t.Helper()
	meta := rawKeys(t, s, "thread:"+tid+":meta", "thread:"+tid+":meta\x00")
	out := []string{"thread " + meta["thread:"+tid+":meta"]}
	for _, mid := range mids {
		out = append(out, "message "+mid)
		versions := rawKeys(t, s, "version:msg:"+mid+":", "version:msg:"+mid+";")
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range versions {
				if !yield(k) {
					return
				}
			}
		}) {
			out = append(out, "version "+versions[k])
		}
	}
	return out
}

func TestReadThreadContentIsEverythingStored(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	for _, tid := range []string{"a", "a-1", "ab"} {
		fillThread(t, s, tid, 7) // edits and tombstones among them
		c.Advance(1)
	}
	deleteThread(t, s, "a")
	msgs, _, err := s.ListMessages(ctx, "a", store.ListOptions{IncludeDeleted: true})
	if err != nil {
		t.Fatal(err)
	}
	var mids []string
	for _, m := range msgs {
		mids = append(mids, m.ID)
	}
	if len(mids) != 7 {
		t.Fatalf("thread a lists %d messages", len(mids))
	}

	var got recordSink
	if err := s.ReadThreadContent(ctx, "a", &got); err != nil {
		t.Fatal(err)
	}
	want := storedContent(t, s, "a", mids)
	if !slices.Equal(got.lines, want) {
		t.Fatalf("thread content:\n got %q\nwant %q", got.lines, want)
	}
	if n := strings.Count(strings.Join(got.lines, "\n"), "\nversion "); n != 7+3+2 {
		t.Fatalf("%d versions, want 12 (7 messages, 3 edits, 2 tombstones)", n)
	}

	// One message: its thread for context, then its versions.
	var one recordSink
	if err := s.ReadMessageContent(ctx, "a-1", "a-1-m0", &one); err != nil {
		t.Fatal(err)
	}
	if want := storedContent(t, s, "a-1", []string{"a-1-m0"}); !slices.Equal(one.lines, want) {
		t.Fatalf("message content:\n got %q\nwant %q", one.lines, want)
	}
	// Through another thread's ID it is not that thread's content.
	var other recordSink
	if err := s.ReadMessageContent(ctx, "ab", "a-1-m0", &other); err != nil || len(other.lines) != 1 {
		t.Fatalf("message through the wrong thread: %q, %v", other.lines, err)
	}

	// A purged thread has nothing left but says so.
	beginThreadPurge(t, s, "a")
	if _, err := s.PurgeThread(ctx, "a", store.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	var gone recordSink
	if err := s.ReadThreadContent(ctx, "a", &gone); err != nil || !slices.Equal(gone.lines, []string{"thread "}) {
		t.Fatalf("purged thread: %q, %v", gone.lines, err)
	}
	if err := s.ReadThreadContent(ctx, "a:b", &gone); !errors.Is(err, store.ErrInvalidID) {
		t.Fatalf("bad ID: %v", err)
	}
}

// failingSink fails at its nth call.
type failingSink struct{ n int }

func (f *failingSink) call() error {
	if f.n--; f.n == 0 {
		return errSinkFull
	}
	return nil
}

var errSinkFull = errors.New("sink full")

func (f *failingSink) Thread([]byte) error  { return f.call() }
func (f *failingSink) Message(string) error { return f.call() }
func (f *failingSink) Version([]byte) error { return f.call() }

func TestReadContentStopsAtTheSinksError(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	fillThread(t, s, "a", 5)
	for n := 1; n <= 4; n++ {
		if err := s.ReadThreadContent(ctx, "a", &failingSink{n: n}); !errors.Is(err, errSinkFull) {
			t.Fatalf("failing at call %d: %v", n, err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.ReadThreadContent(cancelled, "a", &recordSink{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// countingSink counts and drops what it is given.
type countingSink struct{ messages, versions, bytes int }

func (c *countingSink) Thread(raw []byte) error { c.bytes += len(raw); return nil }
func (c *countingSink) Message(string) error    { c.messages++; return nil }
func (c *countingSink) Version(raw []byte) error {
	c.versions++
	c.bytes += len(raw)
	return nil
}

func TestReadLargeThreadInBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 20,000 messages")
	}
	const messages = 20_000
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	now := c.Now().UnixNano()
	b := s.NewBulk()
	if err := b.PutThread(store.Thread{ID: "big", Deleted: true, DeletedTS: now, CreatedTS: now}); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"text":"a message of ordinary length, long enough to matter"}`)
	versions := make([]store.Message, 2)
	for i := range messages {
		id := fmt.Sprintf("big-%06d", i)
		versions[0] = store.Message{ID: id, Thread: "big", Author: "ana", Body: body, TS: now + int64(i)}
		versions[1] = versions[0]
		versions[1].TS++
		if err := b.PutMessage(versions); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	heap := newHeapMeter(s)
	base, peak := heap.live(), int64(0)
	sink := &sampledSink{every: 10_000, sample: func() { peak = max(peak, heap.live()-base) }}
	if err := s.ReadThreadContent(ctx, "big", sink); err != nil {
		t.Fatal(err)
	}
	if sink.messages != messages || sink.versions != 2*messages {
		t.Fatalf("read %d messages, %d versions", sink.messages, sink.versions)
	}
	// The thread's versions hold about 7 MiB: a reader that kept them
	// would pass the limit, one that streams them stays far under it.
	const limit = 3 << 20
	t.Logf("read %.1f MiB; live heap growth %.1f MiB", float64(sink.bytes)/(1<<20), float64(peak)/(1<<20))
	if peak > limit {
		t.Fatalf("live heap grew by %.1f MiB while reading, limit %d MiB", float64(peak)/(1<<20), limit>>20)
	}
}

// sampledSink counts and calls sample every so many versions.
type sampledSink struct {
	countingSink
	every  int
	sample func()
}

func (s *sampledSink) Version(raw []byte) error {
	if s.countingSink.Version(raw); s.versions%s.every == 0 {
		s.sample()
	}
	return nil
}

// One reader re-bounded item after item reads what a reader per item does.
func TestContentReaderReadsManyItems(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	for _, tid := range []string{"a", "a-1", "b"} {
		fillThread(t, s, tid, 4)
	}
	cr, err := s.NewContentReader()
	if err != nil {
		t.Fatal(err)
	}
	defer cr.Close()
	for _, item := range []struct{ tid, mid string }{{"b", ""}, {"a", ""}, {"a-1", "a-1-m2"}, {"a-1", ""}, {"a", "a-m0"}} {
		var shared, own recordSink
		var err1, err2 error
		if item.mid == "" {
			err1, err2 = cr.Thread(ctx, item.tid, &shared), s.ReadThreadContent(ctx, item.tid, &own)
		} else {
			err1, err2 = cr.Message(ctx, item.tid, item.mid, &shared), s.ReadMessageContent(ctx, item.tid, item.mid, &own)
		}
		if err1 != nil || err2 != nil || len(own.lines) < 2 || !slices.Equal(shared.lines, own.lines) {
			t.Fatalf("%+v: shared reader %q (%v), own reader %q (%v)", item, shared.lines, err1, own.lines, err2)
		}
	}
}
