package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// matrixCase is one cell of the policy matrix: which cause makes the
// target message due, and everything that may keep it.
type matrixCase struct {
	cause     string
	hold      bool
	dry       bool
	override  string // "absent", "present" (turns the cause off for the thread), "cleared"
	restore   string // deleted only: "none", "before" the run, "after" its purge began
	interrupt string // "none", "cancel" (shutdown at a batch), "crash" (state copied mid-purge, run again on the copy)
}

func (c matrixCase) name() string {
	return fmt.Sprintf("%s/hold=%t/dry=%t/override=%s/restore=%s/interrupt=%s", c.cause, c.hold, c.dry, c.override, c.restore, c.interrupt)
}

// purged says whether the target must be gone at the end.
func (c matrixCase) purged() bool {
	return !c.hold && !c.dry && c.override != "present" && c.restore != "before"
}

func matrixCases() []matrixCase {
	var out []matrixCase
	for _, cause := range []string{audit.CauseDeleted, audit.CauseMaxAge, audit.CauseMaxMessages} {
		restores := []string{"none"}
		if cause == audit.CauseDeleted {
			restores = []string{"none", "before", "after"}
		}
		for _, hold := range []bool{false, true} {
			for _, dry := range []bool{false, true} {
				for _, override := range []string{"absent", "present", "cleared"} {
					for _, restore := range restores {
						for _, interrupt := range []string{"none", "cancel", "crash"} {
							out = append(out, matrixCase{cause, hold, dry, override, restore, interrupt})
						}
					}
				}
			}
		}
	}
	return out
}

// TestPolicyMatrix runs every cause × legal hold × dry run × override ×
// restore × interruption and checks the data and the audit of all runs
// together: the target is gone exactly when nothing keeps it, recorded
// purged exactly once with its cause, the neighbour always stays, and the
// indexes equal a rebuild.
func TestPolicyMatrix(t *testing.T) {
	// Each case has its own store, clock and audit folder: they run in
	// parallel, overlapping their fsyncs.
	for _, c := range matrixCases() {
		t.Run(c.name(), func(t *testing.T) {
			t.Parallel()
			runMatrixCase(t, c)
		})
	}
}

func runMatrixCase(t *testing.T, c matrixCase) {
	e := newEnv(t)
	e.cfg.BatchSize = 1 // several batches per item, so an interruption lands mid-purge
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var off PolicyOverride
	switch c.cause {
	case audit.CauseDeleted:
		off.MessagePeriod = ptr("60d")
	case audit.CauseMaxAge:
		e.cfg.MaxAge = 30 * day
		off.MaxAge = ptr("0")
	case audit.CauseMaxMessages:
		e.cfg.MaxMessages = 1
		off.MaxMessages = ptr(0)
	}
	e.thread("t", 0, 1)
	target := "t-target"
	_, err := e.st.AppendMessage(ctx, "t", store.Message{ID: target, Body: json.RawMessage(`"MatrixTargetQ9"`)})
	must(err)
	for v := range 2 {
		_, err = e.st.EditMessage(ctx, "t", target, json.RawMessage(fmt.Sprintf(`"MatrixTargetQ9 v%d"`, v)))
		must(err)
	}
	if c.cause == audit.CauseDeleted {
		e.deleteMessage("t", target)
	}
	e.at(39 * day)
	keeper := "t-keeper"
	_, err = e.st.AppendMessage(ctx, "t", store.Message{ID: keeper, Body: json.RawMessage(`"MatrixKeeperQ9"`)})
	must(err)
	e.at(40 * day)

	r := e.runner()
	if c.override != "absent" {
		_, err := r.SetThreadPolicy(ctx, "t", off)
		must(err)
	}
	if c.override == "cleared" {
		must(r.ClearThreadPolicy(ctx, "t"))
	}
	if c.hold {
		_, err := e.st.SetLegalHold(ctx, "t", true)
		must(err)
	}
	if c.restore == "before" {
		_, err := e.st.RestoreMessage(ctx, "t", target)
		must(err)
	}

	var crashDir string
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.hooks.beforeBatch = func(_ context.Context, b batchPoint) {
		if b.N != 2 {
			return
		}
		if c.restore == "after" {
			// The purge has begun: restore loses.
			if _, err := e.st.RestoreMessage(ctx, "t", target); !errors.Is(err, store.ErrPurgeInProgress) {
				t.Errorf("restore during the purge: %v, want ErrPurgeInProgress", err)
			}
		}
		switch c.interrupt {
		case "cancel":
			cancel()
		case "crash":
			crashDir = crashCopy(t, e)
		}
	}
	req := RunRequest{DryRun: c.dry, Trigger: TriggerSchedule}
	res, err := r.Run(cctx, req)
	must(err)
	if c.purged() {
		// The interruption must land mid-purge, or the case proves nothing.
		switch {
		case c.interrupt == "crash" && crashDir == "":
			t.Fatal("no crash copy was taken: the purge had no second batch")
		case c.interrupt == "cancel" && res.Status != audit.RunInterrupted:
			t.Fatalf("the cancelled run ended %s", res.Status)
		}
	}
	files := []string{res.AuditFile}
	if crashDir != "" {
		// What a kill -9 at that batch leaves: the database as the log has
		// it and the audit file as it was on disk. Run again on that.
		e = e.reopenAt(crashDir)
		r = e.runner()
		files = nil
	}
	if c.interrupt != "none" || crashDir != "" {
		r.hooks.beforeBatch = nil
		res, err = r.Run(ctx, req)
		must(err)
		if res.Status != audit.RunCompleted {
			t.Fatalf("the run after the interruption: %+v", res)
		}
		files = append(files, res.AuditFile)
		if crashDir != "" {
			files = e.auditFiles() // the sealed crashed file and this run's
		}
	}

	// The audit of all runs together.
	recorded := map[string]int{}
	for _, f := range files {
		if err := audit.VerifyFile(f); err != nil {
			t.Fatalf("%s does not verify: %v", f, err)
		}
		for _, it := range readAudit(t, f).Items {
			if it.ItemID == keeper {
				t.Fatalf("the keeper has a record: %+v", it)
			}
			if it.ItemID != target {
				continue
			}
			if it.Status == audit.StatusPurged || it.Status == audit.StatusDryRun {
				if it.Cause != c.cause {
					t.Fatalf("record %+v, want cause %s", it, c.cause)
				}
				recorded[it.Status]++
			}
		}
	}
	wantPurged := 0
	if c.purged() {
		wantPurged = 1
	}
	if recorded[audit.StatusPurged] != wantPurged {
		t.Fatalf("purged records of the target: %d, want %d (%v)", recorded[audit.StatusPurged], wantPurged, files)
	}
	if c.dry && !c.hold && c.override != "present" && c.restore != "before" && recorded[audit.StatusDryRun] == 0 {
		t.Fatal("the dry run did not preview the target")
	}
	if gone := !e.exists(store.KindMessage, target); gone != c.purged() {
		t.Fatalf("target gone = %v, want %v", gone, c.purged())
	}
	if !e.exists(store.KindMessage, keeper) {
		t.Fatal("the keeper was purged")
	}
	if pending, err := e.st.PendingPurges(ctx); err != nil || len(pending) != 0 {
		t.Fatalf("pending purges at the end: %+v, %v", pending, err)
	}
	checkIndexes(t, e)
}

// crashCopy copies the database (a Pebble checkpoint: what its log holds)
// and the audit files as they are on disk, leaving out the lease, as a
// kill -9 at this instant would leave them for the next process.
func crashCopy(t *testing.T, e *env) string {
	t.Helper()
	dir := t.TempDir()
	if err := e.st.DB().Checkpoint(filepath.Join(dir, "db")); err != nil {
		t.Fatal(err)
	}
	src := e.cfg.AuditPath
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(dir, "audit", rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o750)
		}
		if strings.HasPrefix(d.Name(), "retention.lock") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o640)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// reopenAt is a new env over a crash copy, sharing the clock and config.
func (e *env) reopenAt(dir string) *env {
	e.t.Helper()
	st, err := store.Open(filepath.Join(dir, "db"), store.Options{Now: e.clock.Now})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { st.Close() })
	n := *e
	n.dir, n.st = dir, st
	n.cfg.AuditPath = filepath.Join(dir, "audit")
	n.cfg.LeasePath = filepath.Join(dir, "audit", "retention.lock")
	return &n
}

// A max_age or max_messages purge is erased like any other: none of the
// purged message's content can be found in the data directory, and the
// live neighbour's can.
func TestPolicyPurgesAreErased(t *testing.T) {
	for _, cause := range []string{audit.CauseMaxAge, audit.CauseMaxMessages} {
		t.Run(cause, func(t *testing.T) {
			e := newEnv(t)
			e.cfg.Erase = true
			ctx := context.Background()
			e.thread("t", 0, 1)
			old := "ErasedBody" + strings.ReplaceAll(cause, "_", "") + "Q3"
			_, err := e.st.AppendMessage(ctx, "t", store.Message{ID: "m-old", Body: json.RawMessage(`"` + old + `"`)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.st.EditMessage(ctx, "t", "m-old", json.RawMessage(`"`+old+` edited"`)); err != nil {
				t.Fatal(err)
			}
			must := func(err error) {
				if err != nil {
					t.Fatal(err)
				}
			}
			must(e.st.DB().Flush())
			e.at(40 * day)
			_, err = e.st.AppendMessage(ctx, "t", store.Message{ID: "m-new", Body: json.RawMessage(`"KeptBodyQ3"`)})
			must(err)
			if cause == audit.CauseMaxAge {
				e.cfg.MaxAge = 30 * day
			} else {
				e.cfg.MaxMessages = 1
			}
			res, ra := e.run(e.runner(), RunRequest{Trigger: TriggerSchedule})
			if res.Purged != 1 || !ra.Footer.Erased || ra.item(t, "m-old").Cause != cause {
				t.Fatalf("run %+v, footer %+v", res, ra.Footer)
			}
			dbDir := filepath.Join(e.dir, "db")
			storetest.RequireNone(t, dbDir, old)
			storetest.RequireAll(t, dbDir, "KeptBodyQ3")
		})
	}
}

// After random writes, policy changes and runs, the indexes equal a full
// recomputation from the data and no purged record names an item that
// still exists.
func TestPolicyPropertyRandomOperationsAndRuns(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed_", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 11))
			e := newEnv(t)
			ctx := context.Background()
			threads := []string{"a", "b", "c", "d"}
			for _, tid := range threads {
				e.thread(tid, 0, 1)
			}
			var msgs []string
			owner := map[string]string{}
			elapsed := day
			for step := range 200 {
				elapsed += time.Duration(rng.IntN(48)) * time.Hour
				e.at(elapsed)
				tid := threads[rng.IntN(len(threads))]
				mid := ""
				if len(msgs) > 0 {
					mid = msgs[rng.IntN(len(msgs))]
				}
				switch op := rng.IntN(14); {
				case op < 5 || mid == "":
					id := fmt.Sprint(tid, "-", step)
					if _, err := e.st.AppendMessage(ctx, tid, store.Message{ID: id, Body: json.RawMessage(`"x"`)}); err == nil {
						msgs = append(msgs, id)
						owner[id] = tid
					}
				case op == 5:
					_, _ = e.st.EditMessage(ctx, owner[mid], mid, json.RawMessage(`"y"`))
				case op == 6:
					_, _ = e.st.DeleteMessage(ctx, owner[mid], mid)
				case op == 7:
					_, _ = e.st.RestoreMessage(ctx, owner[mid], mid)
				case op == 8:
					_, _ = e.st.SetLegalHold(ctx, tid, rng.IntN(3) == 0)
				case op == 9:
					if rng.IntN(3) == 0 {
						_, _ = e.st.DeleteThread(ctx, tid)
					} else {
						_, _ = e.st.RestoreThread(ctx, tid)
					}
				case op == 10:
					o := PolicyOverride{}
					if rng.IntN(2) == 0 {
						o.MaxAge = ptr(fmt.Sprintf("%dd", rng.IntN(20)))
					}
					if rng.IntN(2) == 0 {
						o.MaxMessages = ptr(rng.IntN(5))
					}
					_, _ = e.runner().SetThreadPolicy(ctx, tid, o)
				case op == 11:
					_ = e.runner().ClearThreadPolicy(ctx, tid)
				default:
					e.cfg.MaxAge = time.Duration(rng.IntN(3)) * 10 * day
					e.cfg.MaxMessages = rng.IntN(6)
					e.cfg.MinPeriod = time.Hour
					res, err := e.runner().Run(ctx, RunRequest{DryRun: rng.IntN(3) == 0, Trigger: TriggerSchedule})
					if err != nil {
						t.Fatal(err)
					}
					for _, it := range e.audit(res).Items {
						if it.Status == audit.StatusPurged && e.exists(store.ItemKind(it.ItemType), it.ItemID) {
							t.Fatalf("purged record for %s, which exists", it.ItemID)
						}
					}
					checkIndexes(t, e)
				}
			}
			checkIndexes(t, e)
		})
	}
}
