package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// TestFaultPolicyRunKilled kills `progressdb retention run` with SIGKILL
// while it purges live messages for max_age and max_messages, reruns until
// a run completes, and checks: every due message is gone and recorded
// purged exactly once, with its cause, across all audit files; nothing
// else is gone; a held thread keeps everything; every file verifies once
// sealed; and the live-message indexes equal a rebuild.
func TestFaultPolicyRunKilled(t *testing.T) {
	t.Parallel()
	const (
		threads  = 40
		perOld   = 6  // messages of each thread created 100 days ago: due by max_age (30d)
		perNew   = 12 // recent ones; MAX_MESSAGES=8 takes the 4 oldest of them
		maxMsgs  = 8
		heldTID  = "held"
		maxAge   = "30d"
		versions = 3
	)
	// Kills land within window of the run's header: among the purges'
	// first batches. Timed from the header, not the process start, which
	// a loaded machine can stretch past any fixed window.
	const window = 100 * time.Millisecond
	midRun := 0
	// Three trials even in the short mode: a kill can land before a run
	// starts, and the test needs one that lands during a run.
	for i := range pick(3, suite.trials) {
		t.Run(fmt.Sprintf("trial_%d", i), func(t *testing.T) {
			rng := trialRand(t, i)
			s := newSite(t.TempDir())
			due := map[string]string{} // message → cause
			kept := map[string]bool{}
			st, err := store.Open(s.db, store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			b := st.NewBulk()
			now := time.Now()
			body := json.RawMessage(`{"text":"policy fault"}`)
			for n := range threads + 1 {
				tid := fmt.Sprintf("p%03d", n)
				if n == threads {
					tid = heldTID
				}
				must(t, b.PutThread(store.Thread{ID: tid, Title: "t", Author: "a", CreatedTS: now.UnixNano(),
					UpdatedTS: now.UnixNano(), LegalHold: tid == heldTID}))
				for j := range perOld + perNew {
					ts := now.Add(-100 * 24 * time.Hour).Add(time.Duration(j) * time.Minute)
					if j >= perOld {
						ts = now.Add(-time.Hour).Add(time.Duration(j) * time.Second)
					}
					mid := fmt.Sprintf("%s-m%02d", tid, j)
					var vs []store.Message
					for v := range versions {
						vs = append(vs, store.Message{ID: mid, Thread: tid, Author: "a", Body: body, TS: ts.Add(time.Duration(v) * time.Millisecond).UnixNano()})
					}
					must(t, b.PutMessage(vs))
					switch {
					case tid == heldTID:
						kept[mid] = true
					case j < perOld:
						due[mid] = audit.CauseMaxAge
					case j < perOld+perNew-maxMsgs:
						due[mid] = audit.CauseMaxMessages
					default:
						kept[mid] = true
					}
				}
			}
			must(t, b.Close())
			must(t, st.Close())

			env := s.env().with(
				"PROGRESSDB_RETENTION_MAX_AGE", maxAge,
				"PROGRESSDB_RETENTION_MAX_MESSAGES", fmt.Sprint(maxMsgs),
				"PROGRESSDB_RETENTION_BATCH_SIZE", "2",
				"PROGRESSDB_RETENTION_BATCH_PAUSE", "1ms",
			)
			kills := 0
			for attempt := 0; ; attempt++ {
				if attempt > 8 {
					t.Fatalf("no run completed in %d attempts", attempt)
				}
				p := startRetention(t, env)
				if attempt < 2 && runStarted(t, s, p) && killAfter(p, time.Duration(rng.Int64N(int64(window)))) {
					kills++
					if len(abandonedRuns(t, s)) > 0 {
						midRun++ // the kill left a run's audit file in progress
					}
					continue
				}
				if code := p.wait(t, processTimeout); code != 0 {
					t.Fatalf("attempt %d: exit %d\n%s", attempt, code, p.output())
				}
				if res := parseResult(p); res == nil || res.Status != audit.RunCompleted {
					t.Fatalf("attempt %d: no completed run\n%s", attempt, p.output())
				}
				break
			}
			t.Logf("%d kills before the completing run", kills)

			// Each due message has exactly one purged record, even when a
			// kill landed between its record and the clearing of its purge
			// marker (spec §5).
			purged := map[string]int{}
			for _, f := range readAudit(t, s.audit) {
				if !f.sealed {
					t.Fatalf("%s left in progress", f.path)
				}
				if err := audit.VerifyFile(f.path); err != nil {
					t.Fatalf("%s: %v", f.path, err)
				}
				for _, it := range f.items {
					if it.Status != audit.StatusPurged {
						continue
					}
					purged[it.ItemID]++
					if due[it.ItemID] != it.Cause {
						t.Errorf("%s purged with cause %q, want %q", it.ItemID, it.Cause, due[it.ItemID])
					}
				}
			}
			st, err = store.Open(s.db, store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			ctx := context.Background()
			for mid := range due {
				if purged[mid] != 1 {
					t.Errorf("%s has %d purged records, want exactly one", mid, purged[mid])
				}
				if ok, _ := st.ItemExists(ctx, store.KindMessage, mid); ok {
					t.Errorf("due message %s still exists", mid)
				}
			}
			for mid := range kept {
				if ok, _ := st.ItemExists(ctx, store.KindMessage, mid); !ok || purged[mid] != 0 {
					t.Errorf("kept message %s: exists %v, purged records %d", mid, ok, purged[mid])
				}
			}
			before := rawRange(t, st, "idx:")
			if _, err := st.RebuildDeletionIndex(ctx); err != nil {
				t.Fatal(err)
			}
			after := rawRange(t, st, "idx:")
			if fmt.Sprint(before) != fmt.Sprint(after) {
				t.Fatalf("indexes differ from a rebuild:\nkept    %v\nrebuilt %v", before, after)
			}
		})
	}
	if midRun == 0 && !t.Failed() {
		t.Fatal("no kill landed while a run was going: the test proved nothing")
	}
}

// runStarted waits until p's run has an audit file in progress, or p
// ended; it reports whether the run is going.
func runStarted(t testing.TB, s site, p *proc) bool {
	t.Helper()
	for deadline := time.Now().Add(processTimeout); time.Now().Before(deadline); {
		select {
		case <-p.done:
			return false
		case <-time.After(2 * time.Millisecond):
		}
		// A file in progress with its header: names only, since reading
		// a file the run is about to seal could race with its rename.
		found := false
		_ = filepath.WalkDir(s.audit, func(path string, d fs.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(d.Name(), ".jsonl.inprogress") {
				if info, err := d.Info(); err == nil && info.Size() > 0 {
					found = true
				}
			}
			return nil
		})
		if found {
			return true
		}
	}
	t.Fatal("no run started")
	return false
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
