package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// writeLog is what one writer of TestFaultWritesKilled was told: the
// messages it was acknowledged, in order, and the state of its own thread.
type writeLog struct {
	tid     string
	acked   []string        // message IDs, in the order of their 201s
	deleted map[string]bool // acknowledged deletes (204)
	// inFlight is a message whose delete was sent but not answered when
	// the server died: either outcome is allowed.
	inFlight string

	ownsThread    bool // the writer deletes and restores its thread
	threadDeleted bool // as last acknowledged
	threadUnsure  bool // a delete or restore was not answered
}

// TestFaultWritesKilled kills `progressdb serve` with SIGKILL while many
// clients write at once: 16 writers on one hot thread (they share fsyncs
// through group commit) and 8 more on threads of their own that they also
// delete and restore. After the kill the database is opened and checked:
// no acknowledged write is lost (messages, deletes, thread states); each
// writer's messages are listed in the order they were acknowledged; every
// log entry has its message's versions and every message its log entry;
// and the deletion and live-thread indexes are exactly what a rebuild from
// the data finds, so whatever unacknowledged writes survived broke nothing.
func TestFaultWritesKilled(t *testing.T) {
	t.Parallel()
	for i := range pick(1, suite.trials) {
		t.Run(fmt.Sprintf("trial_%d", i), func(t *testing.T) {
			rng := trialRand(t, i)
			s := newSite(t.TempDir())
			srv := startServer(t, s.env().with("PROGRESSDB_RETENTION_ENABLED", "false", "PROGRESSDB_LOG_LEVEL", "warn"))

			const hotWriters, ownWriters = 16, 8
			logs := make([]*writeLog, hotWriters+ownWriters)
			for w := range logs {
				l := &writeLog{tid: "hot", deleted: map[string]bool{}}
				if w >= hotWriters {
					l.tid, l.ownsThread = fmt.Sprintf("own%d", w-hotWriters), true
				}
				logs[w] = l
			}
			for _, tid := range []string{"hot", "own0", "own1", "own2", "own3", "own4", "own5", "own6", "own7"} {
				srv.mustCall(t, "POST", "/v1/threads", map[string]string{"id": tid, "title": "t", "author": "a"}, "", http.StatusCreated, nil)
			}

			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			var wg sync.WaitGroup
			for w, l := range logs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					write(ctx, srv.url, w, l)
				}()
			}
			delay := 300*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second)))
			time.Sleep(delay)
			srv.kill()
			stop()
			wg.Wait()
			total := 0
			for _, l := range logs {
				total += len(l.acked)
			}
			t.Logf("killed after %s with %d messages acknowledged", delay, total)
			if total == 0 {
				t.Fatal("no write was acknowledged before the kill")
			}
			checkWrites(t, s.db, logs)
		})
	}
}

// write appends messages to its thread until the server dies: even ones
// with an ID of its own, odd ones generated; it deletes every fourth, and
// a writer that owns its thread deletes and restores it every tenth.
func write(ctx context.Context, url string, w int, l *writeLog) {
	for n := 0; ctx.Err() == nil; n++ {
		if l.ownsThread && n%10 == 9 {
			op, path := "DELETE", "/v1/threads/"+l.tid
			if l.threadDeleted {
				op, path = "POST", path+"/restore"
			}
			l.threadUnsure = true
			status, _, err := send(ctx, op, url+path, nil)
			if err != nil {
				return
			}
			if status/100 == 2 {
				l.threadDeleted, l.threadUnsure = !l.threadDeleted, false
			}
			continue
		}
		if l.threadDeleted {
			continue // its own thread takes no messages while deleted
		}
		req := map[string]any{"author": "a", "body": map[string]int{"n": n}}
		if n%2 == 0 {
			req["id"] = fmt.Sprintf("w%d-%d", w, n)
		}
		status, body, err := send(ctx, "POST", url+"/v1/threads/"+l.tid+"/messages", req)
		if err != nil {
			return
		}
		if status != http.StatusCreated {
			continue
		}
		var m wire.Message
		if json.Unmarshal(body, &m) != nil {
			continue
		}
		l.acked = append(l.acked, m.ID)
		if n%4 == 0 {
			l.inFlight = m.ID
			status, _, err := send(ctx, "DELETE", url+"/v1/threads/"+l.tid+"/messages/"+m.ID, nil)
			if err != nil {
				return
			}
			if status == http.StatusNoContent {
				l.deleted[m.ID] = true
			}
			l.inFlight = ""
		}
	}
}

// send is one request without a test: writers run until the server dies.
func send(ctx context.Context, method, url string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return 0, nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// checkWrites opens the killed server's database and checks what
// TestFaultWritesKilled promises.
func checkWrites(t *testing.T, dbPath string, logs []*writeLog) {
	t.Helper()
	ctx := context.Background()
	st := openStore(t, dbPath)
	defer st.Close()
	bad := &findings{t: t}
	defer bad.close()

	listed := map[string]map[string]int{} // thread → message → position
	for _, l := range logs {
		if listed[l.tid] != nil {
			continue
		}
		msgs, next, err := st.ListMessages(ctx, l.tid, store.ListOptions{Limit: 1000, IncludeDeleted: true})
		pos := map[string]int{}
		for ; err == nil; msgs, next, err = st.ListMessages(ctx, l.tid, store.ListOptions{Limit: 1000, IncludeDeleted: true, Cursor: next}) {
			for _, m := range msgs {
				pos[m.ID] = len(pos)
			}
			if next == "" {
				break
			}
		}
		if err != nil {
			t.Fatalf("list messages of %s: %v", l.tid, err)
		}
		listed[l.tid] = pos
	}
	for w, l := range logs {
		prev := -1
		for _, mid := range l.acked {
			p, ok := listed[l.tid][mid]
			if !ok {
				bad.errorf("writer %d: acknowledged message %s of %s is lost", w, mid, l.tid)
				continue
			}
			if p < prev {
				bad.errorf("writer %d: message %s is listed before one acknowledged earlier", w, mid)
			}
			prev = p
			m, err := st.GetMessage(ctx, l.tid, mid)
			switch {
			case err != nil:
				bad.errorf("writer %d: message %s: %v", w, mid, err)
			case l.deleted[mid] && !m.Deleted:
				bad.errorf("writer %d: acknowledged delete of %s is lost", w, mid)
			case m.Deleted && !l.deleted[mid] && l.inFlight != mid:
				bad.errorf("writer %d: message %s is deleted, but no delete was sent", w, mid)
			}
		}
		if l.ownsThread && !l.threadUnsure {
			th, err := st.GetThread(ctx, l.tid)
			if err != nil || th.Deleted != l.threadDeleted {
				bad.errorf("thread %s: deleted=%t (%v), acknowledged deleted=%t", l.tid, th.Deleted, err, l.threadDeleted)
			}
		}
	}
	checkLogMatchesVersions(t, st, bad)

	// The indexes the writes kept are what a rebuild finds.
	before := rawRange(t, st, "idx:")
	if _, err := st.RebuildDeletionIndex(ctx); err != nil {
		t.Fatalf("rebuild indexes: %v", err)
	}
	after := rawRange(t, st, "idx:")
	for k := range before {
		if _, ok := after[k]; !ok {
			bad.errorf("index entry %q has no record behind it", k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			bad.errorf("index entry %q was missing", k)
		}
	}
}

// checkLogMatchesVersions checks that every log entry names a message
// whose first version belongs to that thread and was created at the
// entry's time, and that every message has exactly one log entry.
func checkLogMatchesVersions(t *testing.T, st *store.Store, bad *findings) {
	t.Helper()
	entries := map[string]string{} // message → "thread created"
	for k := range rawRange(t, st, threadNS) {
		// thread:<tid>:log:<created>:<mid>; IDs hold no ':'.
		parts := strings.Split(k, ":")
		if len(parts) != 5 || parts[2] != "log" {
			continue
		}
		tid, created, mid := parts[1], strings.TrimLeft(parts[3], "0"), parts[4]
		if prev, dup := entries[mid]; dup {
			bad.errorf("message %s has two log entries: %s and %s %s", mid, prev, tid, created)
		}
		entries[mid] = tid + " " + created
	}
	firsts := map[string]string{} // message → "thread created" of its oldest version
	oldest := map[string]string{} // message → its oldest version number
	for k, v := range rawRange(t, st, versionNS) {
		mid, version, _ := strings.Cut(strings.TrimPrefix(k, versionNS), ":")
		if o, seen := oldest[mid]; seen && o < version {
			continue // zero-padded: string order is numeric order
		}
		var m store.Message
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			bad.errorf("version %s does not decode: %v", k, err)
		}
		oldest[mid], firsts[mid] = version, fmt.Sprint(m.Thread, " ", m.TS)
	}
	for mid, version := range oldest {
		if version != "00000000000000000001" {
			bad.errorf("message %s starts at version %s", mid, version)
		}
	}
	for mid, first := range firsts {
		if entries[mid] != first {
			bad.errorf("message %s: first version says %q, log entry %q", mid, first, entries[mid])
		}
	}
	for mid, e := range entries {
		if _, ok := firsts[mid]; !ok {
			bad.errorf("log entry %s of message %s has no versions", e, mid)
		}
	}
}

// rawRange reads every key and value starting with prefix.
func rawRange(t *testing.T, st *store.Store, prefix string) map[string]string {
	t.Helper()
	it, err := st.DB().NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: prefixEnd(prefix)})
	if err != nil {
		t.Fatalf("iterate %s: %v", prefix, err)
	}
	defer it.Close()
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	if err := it.Error(); err != nil {
		t.Fatalf("iterate %s: %v", prefix, err)
	}
	return out
}
