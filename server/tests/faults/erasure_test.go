package faults

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// The erased author and another whose writing stays, in the same threads.
const (
	erasedAuthor = "ErasedAuthor-F7"
	keptAuthor   = "KeptAuthor-F7"
)

// erasureKEK is the sealing KEK of the erasure scenarios.
var erasureKEK = "base64key://" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))

// erasureSite is a sealed site with the writing of both authors.
type erasureSite struct {
	site
	keys    string
	env     envVars
	erased  []string // the erased author's messages outside the held thread
	kept    []string // the other author's messages
	heldMsg string   // the erased author's message in the held thread
	threads int      // threads the erased author wrote in, the held one left out
	// sealed are the erased author's ciphertexts and wrapped keys as the
	// files hold them before the erasure.
	sealed, wrapped []string
}

// newErasureSite seeds threads through a sealed server: each holds
// messages of both authors (some edited, some soft-deleted), one is under
// legal hold. Purges are paced (batches of 2 keys, 20ms apart), so that a
// kill lands mid-batch.
func newErasureSite(t *testing.T, threads, perThread int) *erasureSite {
	t.Helper()
	dir := t.TempDir()
	es := &erasureSite{site: newSite(dir), keys: filepath.Join(dir, "keys"), threads: threads}
	es.env = es.shortPeriodEnv(30*24*time.Hour).with(
		"PROGRESSDB_KEK", erasureKEK,
		"PROGRESSDB_KEYSTORE_PATH", es.keys,
		"PROGRESSDB_RETENTION_RUN_MISSED", "false",
		"PROGRESSDB_RETENTION_BATCH_SIZE", "2",
		"PROGRESSDB_RETENTION_BATCH_PAUSE", "20ms",
	)
	srv := startServer(t, es.env)
	for i := range threads + 1 {
		tid := fmt.Sprintf("t%03d", i)
		srv.mustCall(t, "POST", "/v1/threads", map[string]string{"id": tid, "title": "title", "author": erasedAuthor}, "", http.StatusCreated, nil)
		for j := range perThread {
			mid := fmt.Sprintf("%s-a%02d", tid, j)
			srv.mustCall(t, "POST", "/v1/threads/"+tid+"/messages", map[string]any{"id": mid, "author": erasedAuthor, "body": "erased " + mid}, "", http.StatusCreated, nil)
			switch j % 3 {
			case 1:
				srv.mustCall(t, "PUT", "/v1/threads/"+tid+"/messages/"+mid, map[string]any{"body": "edited"}, "", http.StatusOK, nil)
			case 2:
				srv.mustCall(t, "DELETE", "/v1/threads/"+tid+"/messages/"+mid, nil, "", http.StatusNoContent, nil)
			}
			if i == threads {
				es.heldMsg = mid
			} else {
				es.erased = append(es.erased, mid)
			}
		}
		kid := tid + "-k"
		srv.mustCall(t, "POST", "/v1/threads/"+tid+"/messages", map[string]any{"id": kid, "author": keptAuthor, "body": "kept"}, "", http.StatusCreated, nil)
		es.kept = append(es.kept, tid+"/"+kid)
	}
	srv.mustCall(t, "PUT", fmt.Sprintf("/admin/threads/t%03d/legal_hold", threads), map[string]bool{"legal_hold": true}, adminToken, http.StatusOK, nil)
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d\n%s", code, srv.output())
	}

	// What the files hold of the erased author before the erasure, read
	// through the key store: a sealed database opens only with it.
	kek, err := keystore.OpenKEK(context.Background(), erasureKEK)
	if err != nil {
		t.Fatal(err)
	}
	defer kek.Close()
	ks, err := keystore.Open(context.Background(), es.keys, keystore.Options{Keeper: kek, DataPath: es.db})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(es.db, store.Options{Sealer: ks, Closer: ks})
	if err != nil {
		_ = ks.Close()
		t.Fatal(err)
	}
	for _, mid := range es.erased {
		vs, err := st.ListVersions(context.Background(), threadOfMsg(mid), mid)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			es.sealed = append(es.sealed, v.Sealed)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	refs := es.authorKeys(t)
	db, err := pebble.Open(es.keys, &pebble.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		if ref.Thread == fmt.Sprintf("t%03d", threads) {
			continue
		}
		v, closer, err := db.Get([]byte(fmt.Sprintf("k:%s:k:%010d", ref.Thread, ref.Number)))
		if err != nil {
			t.Fatal(err)
		}
		es.wrapped = append(es.wrapped, string(bytes.Clone(v)))
		closer.Close()
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if len(es.wrapped) != threads {
		t.Fatalf("%d keys of the erased author outside the held thread, want %d", len(es.wrapped), threads)
	}
	storetest.RequireAll(t, es.db, es.sealed...)
	return es
}

func threadOfMsg(mid string) string { return mid[:strings.IndexByte(mid, '-')] }

// authorKeys lists the erased author's keys, the key store opened here.
func (es *erasureSite) authorKeys(t *testing.T) []keystore.KeyRef {
	t.Helper()
	ctx := context.Background()
	kek, err := keystore.OpenKEK(ctx, erasureKEK)
	if err != nil {
		t.Fatal(err)
	}
	defer kek.Close()
	ks, err := keystore.Open(ctx, es.keys, keystore.Options{Keeper: kek})
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Close()
	refs, err := ks.AuthorKeys(ctx, erasedAuthor)
	if err != nil {
		t.Fatal(err)
	}
	return refs
}

// TestFaultSubjectErasureKilled kills `progressdb serve` with SIGKILL
// during a subject erasure: as it starts (claims being made: records owed,
// keys still there), once the author's keys are destroyed (records owed,
// nothing purged), and mid-batch (some versions purged and recorded). The
// next run, asked for by hand after a restart, finishes the erasure
// first; then: the erasure is completed with exact counts, every erased
// message has exactly one "purged" record (cause subject, the erasure's
// ID) and none of the other author's has any, no key of the author is
// left but in the held thread, nothing of theirs is readable, and none of
// their ciphertexts or wrapped keys is in any file of DB_PATH or the key
// store.
func TestFaultSubjectErasureKilled(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		at   func(t *testing.T, srv *server, es *erasureSite, runID string)
	}{
		{"as_it_starts", func(t *testing.T, srv *server, _ *erasureSite, _ string) {
			waitLog(t, srv, "retention_erasure_started")
		}},
		{"keys_destroyed", func(t *testing.T, srv *server, _ *erasureSite, _ string) {
			waitLog(t, srv, "retention_erasure_keys_destroyed")
		}},
		{"mid_batch", func(t *testing.T, srv *server, es *erasureSite, runID string) {
			waitFor(t, 2*time.Minute, "the erasure's run to record items", func() bool {
				f := fileOfRun(readAudit(t, es.audit), runID)
				return f != nil && len(f.items) >= 1
			})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			es := newErasureSite(t, pick(8, 20), pick(6, 10))
			srv := startServer(t, es.env)
			var acc retention.ErasureAccepted
			srv.mustCall(t, "POST", "/admin/erasures", map[string]string{"author": erasedAuthor}, adminToken, http.StatusAccepted, &acc)
			c.at(t, srv, es, acc.RunID)
			srv.kill()
			if f := fileOfRun(readAudit(t, es.audit), acc.RunID); f == nil || f.sealed {
				t.Fatalf("the erasure's run finished before the kill")
			}
			left := len(es.authorKeys(t)) - 1 // the held thread's stays
			t.Logf("killed with %d of %d keys of the author left", left, es.threads)
			if c.name != "as_it_starts" && left != 0 {
				t.Fatalf("killed after the keys were destroyed, %d left", left)
			}

			srv = startServer(t, es.env)
			var res retention.Result
			srv.mustCall(t, "POST", "/admin/retention/run", nil, adminToken, http.StatusOK, &res)
			var st retention.ErasureStatus
			srv.mustCall(t, "GET", "/admin/erasures/"+acc.ErasureID, nil, adminToken, http.StatusOK, &st)
			if st.Status != retention.ErasureCompleted || st.MessagesPurged != int64(len(es.erased)) ||
				st.KeysDestroyed != int64(es.threads) || len(st.HeldThreads) != 1 || len(st.RunIDs) != 2 {
				t.Fatalf("status %+v; want completed, %d messages, %d keys, one held thread, two runs", st, len(es.erased), es.threads)
			}
			for _, mid := range es.erased {
				srv.mustCall(t, "GET", "/v1/threads/"+threadOfMsg(mid)+"/messages/"+mid+"?include_deleted=true", nil, "", http.StatusNotFound, nil)
			}
			for _, m := range es.kept {
				srv.mustCall(t, "GET", "/v1/threads/"+strings.Replace(m, "/", "/messages/", 1), nil, "", http.StatusOK, nil)
			}
			srv.mustCall(t, "GET", "/v1/threads/"+threadOfMsg(es.heldMsg)+"/messages/"+es.heldMsg+"?include_deleted=true", nil, "", http.StatusOK, nil)
			if code := srv.stop(t); code != 0 {
				t.Fatalf("server exit %d\n%s", code, srv.output())
			}

			records := map[string]int{}
			for _, f := range readAudit(t, es.audit) {
				for _, it := range f.items {
					if it.Status == "purged" {
						records[it.ItemID]++
						if it.Cause != "subject" || it.ErasureID != acc.ErasureID {
							t.Errorf("%s: purged with cause %q for erasure %q", it.ItemID, it.Cause, it.ErasureID)
						}
					}
				}
			}
			for _, mid := range es.erased {
				if records[mid] != 1 {
					t.Errorf("%s has %d purged records, want 1", mid, records[mid])
				}
			}
			if len(records) != len(es.erased) {
				t.Errorf("%d items have purged records, want the %d erased messages", len(records), len(es.erased))
			}
			if refs := es.authorKeys(t); len(refs) != 1 {
				t.Errorf("keys of the author left: %v, want the held thread's only", refs)
			}
			storetest.RequireNone(t, es.db, es.sealed...)
			storetest.RequireNone(t, es.keys, es.wrapped...)
		})
	}
}

// waitLog waits for a log event of the server.
func waitLog(t *testing.T, srv *server, event string) {
	t.Helper()
	waitFor(t, 2*time.Minute, event, func() bool {
		if srv.exited() {
			t.Fatalf("server exited with status %d\n%s", srv.code, srv.output())
		}
		return strings.Contains(srv.output(), `"msg":"`+event+`"`)
	})
}
