package faults

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// shredKEK is the sealed site's local KEK.
var shredKEK = "base64key://" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x5c}, 32))

// shredSteps are the log events of a shredding thread purge (spec §12,
// docs/sealed-content-design.md §6) a kill lands at: the record owed, the
// keys destroyed, the next thread's keys destroyed (the first one's
// delete batches or its record in between), the key store's erase done
// (the group's records next).
var shredSteps = []struct {
	name, event string
	nth         int
}{
	{"record owed", "retention_shred_owed", 1},
	{"keys destroyed", "retention_thread_shredded", 1},
	{"mid-batch", "retention_thread_shredded", 2},
	{"key store erased", "retention_keystore_erased", 1},
}

// sealedSite is a site whose process seals content, with debug logs so
// that the steps of a shredding purge show.
type sealedSite struct {
	site
	keys string
}

func (s sealedSite) env() envVars {
	return pacedEnv(s.site).with(
		"PROGRESSDB_KEK", shredKEK,
		"PROGRESSDB_KEYSTORE_PATH", s.keys,
		"PROGRESSDB_LOG_LEVEL", "debug",
		"PROGRESSDB_RETENTION_BATCH_SIZE", "10",
	)
}

// shredFixture is what seedSealed wrote: the threads due for purge and
// the live ones, each with a marker in its title, author and bodies.
type shredFixture struct {
	due, live []string
}

func marker(tid, field string) string { return "mk-" + tid + "-" + field }

// openSealed opens the site's store with its key store, as the server does.
func openSealed(t testing.TB, s sealedSite) (*store.Store, *keystore.KeyStore) {
	t.Helper()
	ctx := context.Background()
	keeper, err := keystore.OpenKEK(ctx, shredKEK)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := keystore.Open(ctx, s.keys, keystore.Options{Keeper: keeper, DataPath: s.db})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(s.db, store.Options{Sealer: ks})
	if err != nil {
		_ = ks.Close()
		t.Fatal(err)
	}
	return st, ks
}

// seedSealed writes sealed threads, some deleted long enough ago to be
// purged, of sizes drawn from rng.
func seedSealed(t testing.TB, s sealedSite, rng *rand.Rand) shredFixture {
	t.Helper()
	st, ks := openSealed(t, s)
	defer ks.Close()
	defer st.Close()
	b := st.NewBulk()
	now := time.Now()
	var fx shredFixture
	for i := range 10 {
		tid := fmt.Sprintf("s%02d", i)
		th := store.Thread{ID: tid, Title: marker(tid, "title"), Author: marker(tid, "author"),
			CreatedTS: now.Add(-2 * oldAge).UnixNano(), UpdatedTS: now.Add(-2 * oldAge).UnixNano()}
		if i < 7 {
			th.Deleted, th.DeletedTS = true, now.Add(-oldAge).UnixNano()
			fx.due = append(fx.due, tid)
		} else {
			fx.live = append(fx.live, tid)
		}
		if err := b.PutThread(th); err != nil {
			t.Fatal(err)
		}
		for j := range 3 + rng.IntN(10) {
			mid := fmt.Sprintf("%s.m%02d", tid, j)
			var vs []store.Message
			for v := 1; v <= 1+rng.IntN(3); v++ {
				body, _ := json.Marshal(map[string]string{"text": marker(tid, "body")})
				vs = append(vs, store.Message{ID: mid, Thread: tid, Author: marker(tid, "author"), Body: body,
					TS: now.Add(-2*oldAge).UnixNano() + int64(j*10+v)})
			}
			if err := b.PutMessage(vs); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	return fx
}

// TestFaultShreddingKilledAtEachStep kills `progressdb retention run` of a
// sealing server with SIGKILL at each step of a shredding thread purge,
// then runs it again: the second run finishes, every due thread has
// exactly one purged record saying shredded, no key of it is left in the
// key store (nor in any of its files), nothing of it is readable, the live
// threads read as written, and no marker of any thread is in any file of
// DB_PATH (tables decoded, WAL tails read), before or after.
func TestFaultShreddingKilledAtEachStep(t *testing.T) {
	t.Parallel()
	trials := pick(len(shredSteps), max(suite.trials, len(shredSteps)))
	for i := range trials {
		step := shredSteps[i%len(shredSteps)]
		t.Run(fmt.Sprintf("trial_%d_%s", i, strings.ReplaceAll(step.name, " ", "_")), func(t *testing.T) {
			rng := trialRand(t, i)
			dir := t.TempDir()
			s := sealedSite{site: newSite(dir), keys: filepath.Join(dir, "keys")}
			fx := seedSealed(t, s, rng)
			var all []string
			for _, tid := range append(append([]string{}, fx.due...), fx.live...) {
				all = append(all, marker(tid, "title"), marker(tid, "author"), marker(tid, "body"))
			}
			storetest.RequireNone(t, s.db, all...)
			storetest.RequireAll(t, s.keys, "k:"+fx.due[0]+":k:")

			p := startRetention(t, s.env())
			p.killAt(`"msg":"`+step.event+`"`, step.nth)
			if p.wait(t, processTimeout) == 0 {
				t.Fatalf("the run ended before %s was reached\n%s", step.name, p.output())
			}

			p2, res := runRetention(t, s.env())
			if p2.code != 0 || res == nil || res.Status != audit.RunCompleted {
				t.Fatalf("run after the kill: exit %d, %+v\n%s", p2.code, res, p2.output())
			}
			checkShredded(t, s, fx, all)
		})
	}
}

// checkShredded checks the state a completed run leaves (see the test).
func checkShredded(t *testing.T, s sealedSite, fx shredFixture, markers []string) {
	t.Helper()
	ctx := context.Background()
	rep := verifyAudit(t, s.audit)
	if len(rep.InProgress) > 0 {
		t.Errorf("files left in progress after a completed run: %v", rep.InProgress)
	}
	purged := purgedRecords(readAudit(t, s.audit))
	records := map[string]int{}
	for ref, lines := range purged {
		records[ref.id] = len(lines)
		for _, l := range lines {
			if ref.kind == store.KindThread && !l.Shredded {
				t.Errorf("thread %s purged without shredded: %+v", ref.id, l)
			}
		}
	}
	st, ks := openSealed(t, s)
	for _, tid := range fx.due {
		if records[tid] != 1 {
			t.Errorf("thread %s: %d purged records, want 1", tid, records[tid])
		}
		if _, err := ks.KeyByNumber(ctx, tid, 1); !errors.Is(err, keystore.ErrNoKey) {
			t.Errorf("thread %s: key 1 after the purge: %v", tid, err)
		}
		if _, err := st.GetThread(ctx, tid); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("thread %s after the purge: %v", tid, err)
		}
	}
	for _, tid := range fx.live {
		th, err := st.GetThread(ctx, tid)
		if err != nil || th.Title != marker(tid, "title") || th.Author != marker(tid, "author") {
			t.Errorf("live thread %s: %+v, %v", tid, th, err)
		}
		msgs, _, err := st.ListMessages(ctx, tid, store.ListOptions{})
		if err != nil || len(msgs) == 0 || !strings.Contains(string(msgs[0].Body), marker(tid, "body")) {
			t.Errorf("live thread %s's messages: %+v, %v", tid, msgs, err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ks.Close(); err != nil {
		t.Fatal(err)
	}
	storetest.RequireNone(t, s.db, markers...)
	storetest.RequireNone(t, s.keys, markers...)
	var gone []string
	for _, tid := range fx.due {
		gone = append(gone, "k:"+tid+":")
	}
	storetest.RequireNone(t, s.keys, gone...)
	storetest.RequireAll(t, s.keys, "k:"+fx.live[0]+":k:")
}
