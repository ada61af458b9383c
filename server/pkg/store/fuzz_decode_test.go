package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// FuzzDecodeRecords stores arbitrary bytes as a thread's metadata and as a
// message's version (store.Bulk.PutRaw, as legacy or corrupt data), then
// reads them through every API that decodes them and runs retention over
// them, dry and real. Nothing may panic; a record that does not decode is
// reported as ErrMalformed (a message record naming another thread is not
// found in this one); both runs complete; and a real run never deletes a
// record it could not decode.
//
// The retention runner imports this package, so this target lives in the
// external test package; FuzzValidateID and FuzzKeys, which need the key
// builders, live in package store.
func FuzzDecodeRecords(f *testing.F) {
	for _, seed := range []struct {
		thread, message  string
		deleted, rebuild bool
	}{
		{`{"id":"T","title":"x","deleted":true,"deleted_ts":1}`, `{"id":"M","thread":"T","deleted":true,"deleted_ts":1}`, true, false},
		{"{", "{", true, true},
		{"", "", false, true},
		{`{"deleted":"yes"}`, `{"thread":5}`, true, false},
		{`{"id":"other","deleted":true}`, `{"id":"M","thread":"other"}`, true, true},
		{`[]`, `null`, false, false},
		{"\x00\xff", `{"thread":"T","version":-1,"deleted_ts":-9223372036854775808}`, true, true},
		{`{"deleted":true,"deleted_ts":99999999999999999999}`, `{"thread":"T","body":{"a":[1,2,{"b":null}]}}`, true, false},
	} {
		f.Add([]byte(seed.thread), []byte(seed.message), seed.deleted, seed.rebuild)
	}

	ctx := context.Background()
	dir := f.TempDir()
	st, err := store.Open(filepath.Join(dir, "db"), store.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	auditPath := filepath.Join(dir, "audit")
	runner := func(dry bool) *retention.Runner {
		r, err := retention.NewRunner(retention.RunnerOptions{
			Store:  st,
			Config: config.Retention{Enabled: !dry, DryRun: dry, Period: time.Hour, AuditPath: auditPath, LeaseTTL: time.Minute},
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			f.Fatal(err)
		}
		return r
	}
	dry, real := runner(true), runner(false)

	n := 0
	f.Fuzz(func(t *testing.T, threadRaw, messageRaw []byte, deleted, rebuild bool) {
		n++
		tid, mid := fmt.Sprintf("T%d", n), fmt.Sprintf("M%d", n)
		defer wipe(t, st, auditPath)

		// A valid thread and message first, so that the index has entries
		// for them, then the raw bytes over their records.
		old := time.Now().Add(-48 * time.Hour).UnixNano()
		th := store.Thread{ID: tid, Title: "t", Author: "a", CreatedTS: old, UpdatedTS: old}
		msg := store.Message{ID: mid, Thread: tid, Author: "a", Body: json.RawMessage(`"hi"`), TS: old, Version: 1}
		if deleted {
			th.Deleted, th.DeletedTS = true, old
			msg.Deleted, msg.DeletedTS = true, old
		}
		b := st.NewBulk()
		if err := b.PutThread(th); err != nil {
			t.Fatal(err)
		}
		if err := b.PutMessage([]store.Message{msg}); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		metaKey := []byte("thread:" + tid + ":meta")
		versionKey := lastKeyUnder(t, st, "version:msg:"+mid+":")
		b = st.NewBulk()
		if err := b.PutRaw(metaKey, threadRaw); err != nil {
			t.Fatal(err)
		}
		if err := b.PutRaw(versionKey, messageRaw); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if rebuild {
			if _, err := st.RebuildDeletionIndex(ctx); err != nil {
				t.Fatalf("RebuildDeletionIndex: %v", err)
			}
		}

		_, threadErr := st.GetThread(ctx, tid)
		expectDecodeError(t, "GetThread", threadErr, false)
		_, messageErr := st.GetMessage(ctx, tid, mid)
		expectDecodeError(t, "GetMessage", messageErr, true)
		_, _, err := st.ListThreads(ctx, store.ListOptions{IncludeDeleted: true})
		expectDecodeError(t, "ListThreads", err, false)
		_, _, err = st.ListMessages(ctx, tid, store.ListOptions{IncludeDeleted: true})
		expectDecodeError(t, "ListMessages", err, true)
		_, err = st.ListVersions(ctx, tid, mid)
		expectDecodeError(t, "ListVersions", err, true)

		for _, r := range []*retention.Runner{dry, real} {
			res, err := r.Run(ctx, retention.RunRequest{DryRun: r == dry, Trigger: "cli"})
			if err != nil || res.Status != audit.RunCompleted {
				t.Fatalf("retention run (dry=%t) over the records: %+v, %v", r == dry, res, err)
			}
		}
		if errors.Is(threadErr, store.ErrMalformed) && !hasKey(t, st, metaKey) {
			t.Fatalf("a real run deleted the malformed metadata of %s", tid)
		}
		if errors.Is(messageErr, store.ErrMalformed) && hasKey(t, st, metaKey) && !hasKey(t, st, versionKey) {
			t.Fatalf("a real run deleted the malformed version of %s in a thread that stays", mid)
		}
	})
}

// expectDecodeError fails unless err is nil or ErrMalformed (or, for
// message reads, ErrNotFound: a record naming another thread is not in
// this one).
func expectDecodeError(t *testing.T, what string, err error, message bool) {
	t.Helper()
	if err == nil || errors.Is(err, store.ErrMalformed) || (message && errors.Is(err, store.ErrNotFound)) {
		return
	}
	t.Fatalf("%s: %v; want nil or ErrMalformed", what, err)
}

func lastKeyUnder(t *testing.T, st *store.Store, prefix string) []byte {
	t.Helper()
	upper := []byte(prefix)
	upper[len(upper)-1]++
	it, err := st.DB().NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: upper})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	if !it.Last() {
		t.Fatalf("no key under %s", prefix)
	}
	return append([]byte(nil), it.Key()...)
}

func hasKey(t *testing.T, st *store.Store, key []byte) bool {
	t.Helper()
	_, closer, err := st.DB().Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	closer.Close()
	return true
}

// wipe deletes every key of the database but its schema version, and the
// audit files, so that each input starts from an empty store at constant
// cost.
func wipe(t *testing.T, st *store.Store, auditPath string) {
	t.Helper()
	it, err := st.DB().NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := st.DB().NewBatch()
	for ok := it.First(); ok; ok = it.Next() {
		if bytes.HasPrefix(it.Key(), []byte("sys:schema")) {
			continue
		}
		if err := b.Delete(it.Key(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(auditPath)
	for _, e := range entries {
		if e.IsDir() { // month folders; the lease files stay
			if err := os.RemoveAll(filepath.Join(auditPath, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
}
