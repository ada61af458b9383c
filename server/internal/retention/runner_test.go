package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// TestRunRules checks every rule of spec §3 on one item at a time. Items
// are made at t0 and deleted at t0 unless the case says otherwise; the run
// happens at t0+runAt (31 days when zero) with PERIOD=MESSAGE_PERIOD=30d.
func TestRunRules(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(e *env) (store.ItemKind, string)
		runAt  time.Duration
		status string // audit status; "" means no record at all
		reason string // prefix of the record's reason
		kept   bool   // the item still exists after the run
	}{
		{
			name: "deleted thread past its period is purged",
			setup: func(e *env) (store.ItemKind, string) {
				e.thread("t1", 2, 3)
				e.deleteThread("t1")
				return store.KindThread, "t1"
			},
			status: audit.StatusPurged,
		},
		{
			name: "thread due exactly at the end of its period is purged",
			setup: func(e *env) (store.ItemKind, string) {
				e.thread("t1", 1, 1)
				e.deleteThread("t1")
				return store.KindThread, "t1"
			},
			runAt:  30 * day,
			status: audit.StatusPurged,
		},
		{
			name: "thread not yet due is kept without a record",
			setup: func(e *env) (store.ItemKind, string) {
				e.thread("t1", 1, 1)
				e.deleteThread("t1")
				return store.KindThread, "t1"
			},
			runAt: 30*day - time.Second,
			kept:  true,
		},
		{
			name: "thread on legal hold is skipped and kept",
			setup: func(e *env) (store.ItemKind, string) {
				e.thread("t1", 1, 1)
				e.deleteThread("t1")
				if _, err := e.st.SetLegalHold(context.Background(), "t1", true); err != nil {
					e.t.Fatal(err)
				}
				return store.KindThread, "t1"
			},
			status: audit.StatusSkipped,
			reason: reasonLegalHold,
			kept:   true,
		},
		{
			name: "restored thread is never purged",
			setup: func(e *env) (store.ItemKind, string) {
				e.thread("t1", 1, 1)
				e.deleteThread("t1")
				if _, err := e.st.RestoreThread(context.Background(), "t1"); err != nil {
					e.t.Fatal(err)
				}
				return store.KindThread, "t1"
			},
			kept: true,
		},
		{
			name: "live thread is never purged",
			setup: func(e *env) (store.ItemKind, string) {
				e.thread("t1", 1, 1)
				return store.KindThread, "t1"
			},
			kept: true,
		},
		{
			name: "deleted_ts more than 5 minutes ahead is skipped as clock skew",
			setup: func(e *env) (store.ItemKind, string) {
				e.thread("t1", 1, 1)
				e.at(31*day + time.Hour)
				e.deleteThread("t1")
				return store.KindThread, "t1"
			},
			status: audit.StatusSkipped,
			reason: reasonFuture,
			kept:   true,
		},
		{
			name: "deleted_ts a little ahead is only not due",
			setup: func(e *env) (store.ItemKind, string) {
				e.thread("t1", 1, 1)
				e.at(31*day + 4*time.Minute)
				e.deleteThread("t1")
				return store.KindThread, "t1"
			},
			kept: true,
		},
		{
			name: "legacy thread without deleted_ts is stamped, not purged",
			setup: func(e *env) (store.ItemKind, string) {
				e.bulk(func(b *store.Bulk) error {
					return b.PutThread(store.Thread{ID: "legacy", Title: "x", CreatedTS: t0.UnixNano(), Deleted: true})
				})
				return store.KindThread, "legacy"
			},
			status: audit.StatusStamped,
			reason: reasonStamped,
			kept:   true,
		},
		{
			name: "malformed thread metadata is skipped and kept",
			setup: func(e *env) (store.ItemKind, string) {
				e.bulk(func(b *store.Bulk) error {
					return b.PutRaw([]byte("thread:broken:meta"), []byte(`{"id":"broken","deleted":tru`))
				})
				if _, err := e.st.RebuildDeletionIndex(context.Background()); err != nil {
					e.t.Fatal(err)
				}
				return store.KindThread, "broken"
			},
			status: audit.StatusSkipped,
			reason: reasonMalformed,
			kept:   true,
		},
		{
			name: "deleted message in a live thread is purged",
			setup: func(e *env) (store.ItemKind, string) {
				mids := e.thread("t1", 3, 2)
				e.deleteMessage("t1", mids[1])
				return store.KindMessage, mids[1]
			},
			status: audit.StatusPurged,
		},
		{
			name: "deleted message not yet due is kept",
			setup: func(e *env) (store.ItemKind, string) {
				mids := e.thread("t1", 2, 1)
				e.deleteMessage("t1", mids[0])
				return store.KindMessage, mids[0]
			},
			runAt: 29 * day,
			kept:  true,
		},
		{
			name: "restored message is never purged",
			setup: func(e *env) (store.ItemKind, string) {
				mids := e.thread("t1", 2, 1)
				e.deleteMessage("t1", mids[0])
				if _, err := e.st.RestoreMessage(context.Background(), "t1", mids[0]); err != nil {
					e.t.Fatal(err)
				}
				return store.KindMessage, mids[0]
			},
			kept: true,
		},
		{
			name: "deleted message in a thread on legal hold is skipped",
			setup: func(e *env) (store.ItemKind, string) {
				mids := e.thread("t1", 2, 1)
				e.deleteMessage("t1", mids[0])
				if _, err := e.st.SetLegalHold(context.Background(), "t1", true); err != nil {
					e.t.Fatal(err)
				}
				return store.KindMessage, mids[0]
			},
			status: audit.StatusSkipped,
			reason: reasonLegalHold,
			kept:   true,
		},
		{
			name: "deleted message of a purged thread goes with the thread, without a record",
			setup: func(e *env) (store.ItemKind, string) {
				mids := e.thread("t1", 2, 1)
				e.deleteMessage("t1", mids[0])
				e.deleteThread("t1")
				return store.KindMessage, mids[0]
			},
		},
		{
			name: "legacy message tombstone without deleted_ts is stamped",
			setup: func(e *env) (store.ItemKind, string) {
				e.thread("t1", 0, 0)
				e.bulk(func(b *store.Bulk) error {
					return b.PutMessage([]store.Message{
						{ID: "old", Thread: "t1", Author: "a", Body: json.RawMessage(`"hi"`), TS: t0.UnixNano(), Version: 1},
						{ID: "old", Thread: "t1", Author: "a", Body: json.RawMessage(`"hi"`), TS: t0.UnixNano() + 1, Version: 2, Deleted: true},
					})
				})
				return store.KindMessage, "old"
			},
			status: audit.StatusStamped,
			reason: reasonStamped,
			kept:   true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			kind, id := tc.setup(e)
			runAt := tc.runAt
			if runAt == 0 {
				runAt = 31 * day
			}
			e.at(runAt)
			res, ra := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
			if res.Status != audit.RunCompleted || ra.Footer.Status != audit.RunCompleted {
				t.Fatalf("run status %q, footer %q, want completed", res.Status, ra.Footer.Status)
			}
			if tc.status == "" {
				ra.noItem(t, id)
			} else {
				it := ra.item(t, id)
				if it.Status != tc.status || !strings.HasPrefix(it.Reason, tc.reason) || it.ItemType != string(kind) {
					t.Fatalf("record %+v, want %s %s with reason %q", it, kind, tc.status, tc.reason)
				}
				if tc.status == audit.StatusPurged && (it.PurgedAt == nil || it.KeysDeleted == 0) {
					t.Fatalf("purged record without purged_at or keys: %+v", it)
				}
			}
			if got := e.exists(kind, id); got != tc.kept {
				t.Fatalf("%s %s exists=%t after the run, want %t", kind, id, got, tc.kept)
			}
			if pending, err := e.st.PendingPurges(context.Background()); err != nil || len(pending) != 0 {
				t.Fatalf("pending purges after the run: %v %v", pending, err)
			}
		})
	}
}

func (e *env) bulk(fn func(b *store.Bulk) error) {
	e.t.Helper()
	b := e.st.NewBulk()
	if err := fn(b); err != nil {
		e.t.Fatalf("bulk: %v", err)
	}
	if err := b.Close(); err != nil {
		e.t.Fatalf("bulk close: %v", err)
	}
}

func TestPurgeRemovesEveryKeyOfTheThreadAndNothingElse(t *testing.T) {
	e := newEnv(t)
	mids := e.thread("gone", 4, 3)
	keep := e.thread("kept", 2, 2)
	e.deleteThread("gone")
	before := e.threadKeys("gone", mids)
	if len(before) < 1+4+4*3 {
		t.Fatalf("thread has only %d keys", len(before))
	}
	keptBefore := e.threadKeys("kept", keep)

	e.at(31 * day)
	res, ra := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	it := ra.item(t, "gone")
	if it.Status != audit.StatusPurged || it.KeysDeleted != int64(len(before)) {
		t.Fatalf("record %+v, want purged with %d keys", it, len(before))
	}
	if left := e.threadKeys("gone", mids); len(left) != 0 {
		t.Fatalf("keys left after purge: %v", left)
	}
	for k := range e.keys("idx:") {
		if strings.HasSuffix(k, ":gone") || strings.Contains(k, ":gone-m") {
			t.Fatalf("index entry left: %s", k)
		}
	}
	if got := e.threadKeys("kept", keep); !maps.Equal(got, keptBefore) {
		t.Fatal("the live thread's keys changed")
	}
	if res.Purged != 1 || res.KeysDeleted != int64(len(before)) || ra.Footer.Purged != 1 {
		t.Fatalf("result %+v footer %+v", res, ra.Footer)
	}
	for _, m := range mids {
		ra.noItem(t, m)
	}
}

func TestDeletedMessageIsPurgedAndItsThreadIsUntouched(t *testing.T) {
	e := newEnv(t)
	mids := e.thread("t1", 4, 3)
	e.at(day)
	e.deleteMessage("t1", mids[2])
	gone := mids[2]
	before := e.keys("thread:t1:", "version:msg:")
	want := map[string]string{}
	for k, v := range before {
		if !strings.HasPrefix(k, "version:msg:"+gone+":") && !strings.HasSuffix(k, ":"+gone) {
			want[k] = v
		}
	}
	if len(want) == len(before) {
		t.Fatal("test setup: no key of the deleted message found")
	}

	e.at(32 * day)
	_, ra := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	it := ra.item(t, gone)
	if it.Status != audit.StatusPurged || it.ThreadID != "t1" || it.KeysDeleted != int64(len(before)-len(want)) {
		t.Fatalf("record %+v, want purged from t1 with %d keys", it, len(before)-len(want))
	}
	if got := e.keys("thread:t1:", "version:msg:"); !maps.Equal(got, want) {
		t.Fatalf("thread keys after purge differ from before minus the message:\n got %v\nwant %v", got, want)
	}
	if _, err := e.st.GetMessage(context.Background(), "t1", gone); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetMessage after purge: %v, want ErrNotFound", err)
	}
}

func TestMessagePeriodDiffersFromThreadPeriod(t *testing.T) {
	e := newEnv(t)
	e.cfg.MessagePeriod = 7 * day
	e.thread("deleted-thread", 1, 1)
	mids := e.thread("live", 2, 1)
	e.deleteThread("deleted-thread")
	e.deleteMessage("live", mids[0])
	r := e.runner()

	e.at(8 * day)
	_, ra := e.run(r, RunRequest{Trigger: TriggerCLI})
	if it := ra.item(t, mids[0]); it.Status != audit.StatusPurged {
		t.Fatalf("message after 8 days: %+v, want purged", it)
	}
	ra.noItem(t, "deleted-thread")
	if !e.exists(store.KindThread, "deleted-thread") {
		t.Fatal("thread purged after 8 days with a 30-day period")
	}
	if ra.Header.Period != "30d" || ra.Header.MessagePeriod != "7d" {
		t.Fatalf("header periods %q/%q", ra.Header.Period, ra.Header.MessagePeriod)
	}

	e.at(31 * day)
	_, ra = e.run(r, RunRequest{Trigger: TriggerCLI})
	if it := ra.item(t, "deleted-thread"); it.Status != audit.StatusPurged {
		t.Fatalf("thread after 31 days: %+v", it)
	}
}

func TestLegacyRecordIsStampedThenPurgedAPeriodLater(t *testing.T) {
	e := newEnv(t)
	e.bulk(func(b *store.Bulk) error {
		return b.PutThread(store.Thread{ID: "legacy", Title: "x", CreatedTS: 1, UpdatedTS: 2, Deleted: true})
	})
	r := e.runner()

	e.at(400 * day)
	_, ra := e.run(r, RunRequest{Trigger: TriggerCLI})
	it := ra.item(t, "legacy")
	if it.Status != audit.StatusStamped || !it.DeletedAt.Equal(t0.Add(400*day)) {
		t.Fatalf("first run: %+v, want stamped at the run's time", it)
	}
	th, err := e.st.GetThread(context.Background(), "legacy")
	if err != nil || th.DeletedTS != t0.Add(400*day).UnixNano() {
		t.Fatalf("after stamping: %+v %v", th, err)
	}

	e.at(429 * day)
	_, ra = e.run(r, RunRequest{Trigger: TriggerCLI})
	ra.noItem(t, "legacy")

	e.at(430 * day)
	_, ra = e.run(r, RunRequest{Trigger: TriggerCLI})
	if it := ra.item(t, "legacy"); it.Status != audit.StatusPurged {
		t.Fatalf("a period after stamping: %+v, want purged", it)
	}
	if e.exists(store.KindThread, "legacy") {
		t.Fatal("legacy thread still exists")
	}
}

func TestDryRunDeletesNothingAndAuditsEverything(t *testing.T) {
	for _, viaConfig := range []bool{false, true} {
		name := "requested"
		if viaConfig {
			name = "configured"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.cfg.DryRun = viaConfig
			inDue := e.thread("due", 2, 2)
			e.deleteMessage("due", inDue[0]) // goes with its thread: no record of its own
			e.deleteThread("due")
			mids := e.thread("live", 2, 1)
			e.deleteMessage("live", mids[0])
			e.thread("held", 1, 1)
			e.deleteThread("held")
			if _, err := e.st.SetLegalHold(context.Background(), "held", true); err != nil {
				t.Fatal(err)
			}
			e.bulk(func(b *store.Bulk) error {
				return b.PutThread(store.Thread{ID: "legacy", Deleted: true})
			})
			before := e.keys()

			e.at(31 * day)
			res, ra := e.run(e.runner(), RunRequest{DryRun: !viaConfig, Trigger: TriggerCLI})
			if got := e.keys(); !maps.Equal(got, before) {
				t.Fatal("a dry run changed the database")
			}
			if !res.DryRun || !ra.Header.DryRun || res.Status != audit.RunCompleted {
				t.Fatalf("result %+v header %+v", res, ra.Header)
			}
			want := map[string]string{
				"due":    audit.StatusDryRun,
				mids[0]:  audit.StatusDryRun,
				"held":   audit.StatusSkipped,
				"legacy": audit.StatusSkipped,
			}
			for id, status := range want {
				if it := ra.item(t, id); it.Status != status || it.KeysDeleted != 0 {
					t.Fatalf("%s: %+v, want %s", id, it, status)
				}
			}
			if it := ra.item(t, "legacy"); it.Reason != reasonStampDryRun {
				t.Fatalf("legacy reason %q", it.Reason)
			}
			if len(ra.Items) != len(want) {
				t.Fatalf("records %+v, want exactly %d", ra.Items, len(want))
			}
			if res.Eligible != 2 || res.Purged != 0 || res.Skipped != 2 {
				t.Fatalf("counts %+v", res)
			}
			if got := counterValue(t, e.metrics.Runs.WithLabelValues(resultDryRun)); got != 1 {
				t.Fatalf("runs_total{result=dry_run} = %v", got)
			}
		})
	}
}

func TestMaxItemsBoundsARun(t *testing.T) {
	e := newEnv(t)
	e.cfg.MaxItems = 2
	ids := []string{"a1", "a2", "a3", "a4", "a5"}
	for i, id := range ids {
		e.thread(id, 1, 1)
		e.at(time.Duration(i) * time.Minute) // oldest deletion first
		e.deleteThread(id)
	}
	e.at(40 * day)
	res, ra := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	if res.Status != audit.RunCompleted || ra.Footer.Reason != reasonMaxItems || res.Purged != 2 {
		t.Fatalf("result %+v footer %+v", res, ra.Footer)
	}
	for i, id := range ids {
		if got, want := e.exists(store.KindThread, id), i >= 2; got != want {
			t.Fatalf("%s exists=%t, want %t", id, got, want)
		}
	}
}

func TestPurgeRespectsBatchSize(t *testing.T) {
	e := newEnv(t)
	e.cfg.BatchSize = 7
	mids := e.thread("big", 10, 4)
	e.deleteThread("big")
	total := len(e.threadKeys("big", mids))
	r := e.runner()

	var counts []int
	r.hooks.beforeBatch = func(ctx context.Context, b batchPoint) {
		counts = append(counts, len(e.keys("thread:", "version:")))
	}
	e.at(31 * day)
	_, ra := e.run(r, RunRequest{Trigger: TriggerCLI})
	counts = append(counts, len(e.keys("thread:", "version:")))
	if it := ra.item(t, "big"); it.KeysDeleted != int64(total) {
		t.Fatalf("record %+v, want %d keys", it, total)
	}
	if min := (total + 6) / 7; len(counts)-1 < min {
		t.Fatalf("%d batch boundaries for %d keys, want at least %d", len(counts)-1, total, min)
	}
	for i := 1; i < len(counts); i++ {
		if d := counts[i-1] - counts[i]; d > 7 || d < 0 {
			t.Fatalf("batch %d deleted %d keys, batch size is 7 (counts %v)", i, d, counts)
		}
	}
}

func TestBatchPauseUsesTheClock(t *testing.T) {
	e := newEnv(t)
	e.cfg.BatchPause = 10 * time.Second
	e.cfg.BatchSize = 3
	e.thread("t1", 2, 2)
	e.deleteThread("t1")
	e.at(31 * day)

	res, pauses := e.runPaced(e.runner(), 12*time.Second)
	if res.Status != audit.RunCompleted || res.Purged != 1 {
		t.Fatalf("result %+v", res)
	}
	if len(pauses) < 2 {
		t.Fatalf("%d pauses for a purge of several batches", len(pauses))
	}
	for _, d := range pauses {
		if d < 8*time.Second || d > 12*time.Second {
			t.Fatalf("pause %s, want 10s ±20%%", d)
		}
	}
}

func TestRunSkipsWhenTheLeaseIsHeldElsewhere(t *testing.T) {
	e := newEnv(t)
	e.thread("t1", 1, 1)
	e.deleteThread("t1")
	e.at(31 * day)
	other, err := AcquireLease(context.Background(), LeaseConfig{
		Path: e.cfg.LeasePath, TTL: time.Hour, Owner: "other-host/1/abcd", Host: "other-host", PID: 1, Now: e.clock.Now,
	})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	defer other.Release()

	_, err = e.runner().Run(context.Background(), RunRequest{Trigger: TriggerCLI})
	var held *LeaseHeldError
	if !errors.As(err, &held) || !errors.Is(err, ErrLeaseHeld) || held.Holder.Owner != "other-host/1/abcd" {
		t.Fatalf("err = %v, want *LeaseHeldError naming the holder", err)
	}
	if files := e.auditFiles(); len(files) != 0 {
		t.Fatalf("a skipped run wrote audit files: %v", files)
	}
	if !e.exists(store.KindThread, "t1") {
		t.Fatal("a skipped run deleted data")
	}
	if got := counterValue(t, e.metrics.Runs.WithLabelValues(resultSkippedLease)); got != 1 {
		t.Fatalf("runs_total{skipped_lease} = %v", got)
	}
}

func TestRunRefusedWhileAnotherRunGoesInTheProcess(t *testing.T) {
	e := newEnv(t)
	e.cfg.BatchSize = 2
	e.thread("t1", 2, 2)
	e.deleteThread("t1")
	e.at(31 * day)
	r := e.runner()

	reached, proceed := make(chan struct{}), make(chan struct{})
	r.hooks.beforeBatch = func(ctx context.Context, b batchPoint) {
		if b.N == 1 {
			close(reached)
			<-proceed
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(context.Background(), RunRequest{Trigger: TriggerCLI})
		done <- err
	}()
	<-reached
	_, err := r.Run(context.Background(), RunRequest{Trigger: TriggerAdmin})
	var held *LeaseHeldError
	if !errors.As(err, &held) || held.Holder.Owner != r.owner {
		t.Fatalf("second run: %v, want *LeaseHeldError naming this process", err)
	}
	close(proceed)
	if err := <-done; err != nil {
		t.Fatalf("first run: %v", err)
	}
	if len(e.auditFiles()) != 1 {
		t.Fatalf("audit files %v, want only the first run's", e.auditFiles())
	}
}

func TestUnwritableAuditFolderDeletesNothing(t *testing.T) {
	e := newEnv(t)
	e.cfg.AuditPath = filepath.Join(e.dir, "not-a-folder")
	if err := os.WriteFile(e.cfg.AuditPath, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.cfg.LeasePath = filepath.Join(e.dir, "lease", "retention.lock")
	e.thread("t1", 1, 1)
	e.deleteThread("t1")
	e.at(31 * day)
	before := e.keys()

	res, err := e.runner().Run(context.Background(), RunRequest{Trigger: TriggerCLI})
	if err == nil || res.Status != audit.RunFailed || res.Error == "" {
		t.Fatalf("run: %+v %v, want failed", res, err)
	}
	if got := e.keys(); !maps.Equal(got, before) {
		t.Fatal("the database changed although the audit file could not be created")
	}
	if got := counterValue(t, e.metrics.Errors.WithLabelValues(stageAudit)); got < 1 {
		t.Fatalf("errors_total{stage=audit} = %v", got)
	}
	if got := counterValue(t, e.metrics.Runs.WithLabelValues(resultFailed)); got != 1 {
		t.Fatalf("runs_total{result=failed} = %v", got)
	}
	if info, err := ReadLease(e.cfg.LeasePath); err != nil || info.Expires.After(e.clock.Now()) {
		t.Fatalf("lease not released: %+v %v", info, err)
	}
}

func TestRunRecoversAPurgeWhoseAuditRecordWasLost(t *testing.T) {
	e := newEnv(t)
	e.thread("t1", 2, 2)
	e.deleteThread("t1")
	e.at(31 * day)
	ctx := context.Background()
	// A crash after the purge and before the audit record: the marker is all
	// that is left.
	e.beginPurge("t1", "crashedrun01")
	if _, err := e.st.PurgeThread(ctx, "t1", store.PurgeOptions{BatchSize: 100}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Sync(ctx); err != nil {
		t.Fatal(err)
	}

	res, ra := e.run(e.runner(), RunRequest{Trigger: TriggerStartup})
	it := ra.item(t, "t1")
	if it.Status != audit.StatusPurged || !it.Recovered || it.KeysDeleted != 0 ||
		it.Reason != "purge completed by run crashedrun01; audit record written on recovery" {
		t.Fatalf("recovered record %+v", it)
	}
	if res.Purged != 1 {
		t.Fatalf("result %+v", res)
	}
	if pending, err := e.st.PendingPurges(ctx); err != nil || len(pending) != 0 {
		t.Fatalf("markers left: %v %v", pending, err)
	}
}

func TestRunFinishesAPurgeACrashInterrupted(t *testing.T) {
	e := newEnv(t)
	mids := e.thread("t1", 3, 3)
	e.deleteThread("t1")
	e.at(31 * day)
	ctx := context.Background()
	e.beginPurge("t1", "crashedrun02")
	crash := errors.New("crash")
	batches := 0
	_, err := e.st.PurgeThread(ctx, "t1", store.PurgeOptions{BatchSize: 3, BeforeBatch: func(context.Context) error {
		if batches++; batches > 1 {
			return crash
		}
		return nil
	}})
	if !errors.Is(err, crash) {
		t.Fatalf("partial purge: %v", err)
	}
	left := len(e.threadKeys("t1", mids))
	if left == 0 {
		t.Fatal("test setup: nothing left of the partial purge")
	}

	_, ra := e.run(e.runner(), RunRequest{Trigger: TriggerStartup})
	it := ra.item(t, "t1")
	if it.Status != audit.StatusPurged || !it.Recovered || it.KeysDeleted != int64(left) ||
		!strings.HasPrefix(it.Reason, "purge begun by run crashedrun02;") {
		t.Fatalf("recovered record %+v, want purged with %d keys", it, left)
	}
	if e.exists(store.KindThread, "t1") {
		t.Fatal("thread still exists after recovery")
	}
}

func TestLeaseLostMidRunStopsDeleting(t *testing.T) {
	e := newEnv(t)
	e.cfg.BatchSize = 3
	mids := e.thread("t1", 4, 3)
	e.deleteThread("t1")
	e.at(31 * day)
	r := e.runner()
	var countAtLoss int
	r.hooks.beforeBatch = func(ctx context.Context, b batchPoint) {
		if b.N != 2 {
			return
		}
		// Another holder takes the lease over; our next renewal finds out.
		info, err := ReadLease(e.cfg.LeasePath)
		if err != nil {
			t.Errorf("read lease: %v", err)
			return
		}
		info.Owner, info.Epoch = "intruder/1/ffff", info.Epoch+1
		data, _ := json.Marshal(info)
		if err := os.WriteFile(e.cfg.LeasePath, data, 0o640); err != nil {
			t.Errorf("rewrite lease: %v", err)
		}
		if err := b.Lease.(*Lease).Renew(ctx); !errors.Is(err, ErrLeaseLost) {
			t.Errorf("renew after take-over: %v, want ErrLeaseLost", err)
		}
		countAtLoss = len(e.threadKeys("t1", mids))
	}

	res, err := r.Run(context.Background(), RunRequest{Trigger: TriggerCLI})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	ra := e.audit(res)
	if res.Status != audit.RunInterrupted || ra.Footer.Status != audit.RunInterrupted ||
		!strings.HasPrefix(ra.Footer.Reason, reasonLeaseLost) || res.Error != ra.Footer.Reason {
		t.Fatalf("result %+v footer %+v, want interrupted by lease loss", res, ra.Footer)
	}
	if it := ra.item(t, "t1"); it.Status != audit.StatusFailed || it.Reason != reasonInterrupted || it.KeysDeleted == 0 {
		t.Fatalf("record %+v", it)
	}
	if got := len(e.threadKeys("t1", mids)); got != countAtLoss {
		t.Fatalf("%d keys at the loss, %d after: deleting went on without the lease", countAtLoss, got)
	}
	if pending, err := e.st.PendingPurges(context.Background()); err != nil || len(pending) != 1 {
		t.Fatalf("marker must stay for the next run: %v %v", pending, err)
	}
	if info, err := ReadLease(e.cfg.LeasePath); err != nil || info.Owner != "intruder/1/ffff" {
		t.Fatalf("the new holder's lease was touched: %+v %v", info, err)
	}
}

func TestCancelledRunStopsAtABatchBoundary(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	stopAtSecondBatch(t, ctx, func(*Runner) { cancel() }, func(reason string) bool {
		return strings.HasPrefix(reason, reasonShutdown)
	}, nil)
}

// stopAtSecondBatch runs over two deleted threads, calls stop before the
// second batch of the first, and checks that the run stopped there: footer
// interrupted with a reason wantReason accepts, the cut thread failed and
// kept, the other untouched. After resume (when not nil) the next run
// finishes both, the cut thread's record marked recovered.
func stopAtSecondBatch(t *testing.T, ctx context.Context, stop func(r *Runner), wantReason func(string) bool, resume func(r *Runner)) {
	t.Helper()
	e := newEnv(t)
	e.cfg.BatchSize = 3
	mids := e.thread("t1", 4, 3)
	e.thread("t2", 1, 1)
	e.deleteThread("t1")
	e.deleteThread("t2")
	e.at(31 * day)
	r := e.runner()
	r.hooks.beforeBatch = func(_ context.Context, b batchPoint) {
		if b.N == 2 {
			stop(r)
		}
	}
	res, err := r.Run(ctx, RunRequest{Trigger: TriggerSchedule})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	ra := e.audit(res)
	if ra.Footer.Status != audit.RunInterrupted || !wantReason(ra.Footer.Reason) {
		t.Fatalf("footer %+v", ra.Footer)
	}
	if it := ra.item(t, "t1"); it.Status != audit.StatusFailed || it.Reason != reasonInterrupted {
		t.Fatalf("record %+v", it)
	}
	ra.noItem(t, "t2")
	if len(e.threadKeys("t1", mids)) == 0 || !e.exists(store.KindThread, "t2") {
		t.Fatal("the run went on after it was stopped")
	}
	if got := counterValue(t, e.metrics.Runs.WithLabelValues(resultInterrupted)); got != 1 {
		t.Fatalf("runs_total{interrupted} = %v", got)
	}
	// The lease is free again and the next run finishes the purge.
	r.hooks.beforeBatch = nil
	if resume != nil {
		resume(r)
	}
	_, ra = e.run(r, RunRequest{Trigger: TriggerSchedule})
	if it := ra.item(t, "t1"); it.Status != audit.StatusPurged || !it.Recovered {
		t.Fatalf("next run: %+v", it)
	}
	if it := ra.item(t, "t2"); it.Status != audit.StatusPurged {
		t.Fatalf("next run: %+v", it)
	}
}

// PROGRESSDB_RETENTION_ENABLED is the scheduler's switch: while it is off
// the scheduler's runs are refused (real ones; dry runs still work), and
// runs asked for by hand are not.
func TestDisabledRefusesOnlyScheduledRuns(t *testing.T) {
	e := newEnv(t)
	e.cfg.Enabled = false
	r := e.runner()
	for _, trigger := range []string{TriggerSchedule, TriggerStartup} {
		if _, err := r.Run(context.Background(), RunRequest{Trigger: trigger}); !errors.Is(err, ErrDisabled) {
			t.Fatalf("%s: err = %v, want ErrDisabled", trigger, err)
		}
	}
	if len(e.auditFiles()) != 0 {
		t.Fatal("a refused run wrote an audit file")
	}
	if res, _ := e.run(r, RunRequest{DryRun: true, Trigger: TriggerSchedule}); !res.DryRun {
		t.Fatalf("dry run while disabled: %+v", res)
	}
	e.dueThread("t1", 1, 1)
	res, err := r.Run(context.Background(), RunRequest{Trigger: TriggerCLI})
	if err != nil || res.DryRun || res.Status != "completed" || res.Purged != 1 {
		t.Fatalf("a run by hand while disabled: %+v, %v; want it to purge", res, err)
	}
}

func TestRunSealsAnAbandonedFileFirst(t *testing.T) {
	e := newEnv(t)
	e.at(31 * day)
	w, err := audit.Create(e.cfg.AuditPath, "abandoned01", audit.Header{StartedAt: e.clock.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	_ = w // the crashed process never closes it
	res, _ := e.run(e.runner(), RunRequest{Trigger: TriggerStartup})
	rep, err := audit.VerifyDir(e.cfg.AuditPath)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Files != 2 || rep.Verified != 2 || len(rep.InProgress) != 0 {
		t.Fatalf("report %+v after run %s", rep, res.RunID)
	}
}

func TestLogsAndAuditHoldNoContent(t *testing.T) {
	e := newEnv(t)
	mids := e.thread("t1", 2, 2)
	e.deleteMessage("t1", mids[0])
	e.thread("t2", 2, 2)
	e.deleteThread("t2")
	e.at(31 * day)
	res, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	data, err := os.ReadFile(res.AuditFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"logs": e.logs.String(), "audit": string(data)} {
		if strings.Contains(text, "secret") {
			t.Fatalf("%s hold a title, body or author:\n%s", name, text)
		}
	}
	for _, ev := range []string{`"msg":"retention_run_started"`, `"msg":"retention_run_finished"`} {
		if !strings.Contains(e.logs.String(), ev) {
			t.Fatalf("logs lack %s", ev)
		}
	}
}

func TestRunIDsAreShortAndValid(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := newRunID()
		if len(id) != 12 || strings.Trim(id, "0123456789abcdef") != "" || seen[id] {
			t.Fatalf("run ID %q", id)
		}
		if err := store.ValidateID(id); err != nil {
			t.Fatalf("run ID %q: %v", id, err)
		}
		seen[id] = true
	}
}

func TestNewRunnerValidatesConfig(t *testing.T) {
	e := newEnv(t)
	e.cfg.Period = 0
	if _, err := NewRunner(RunnerOptions{Store: e.st, Config: e.cfg}); err == nil {
		t.Fatal("zero period accepted")
	}
	e.cfg.Period = day
	e.cfg.MessagePeriod, e.cfg.BatchSize, e.cfg.LeasePath = 0, 0, ""
	r, err := NewRunner(RunnerOptions{Store: e.st, Config: e.cfg})
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Config(); c.MessagePeriod != day || c.BatchSize != defaultBatchSize || c.LeasePath != filepath.Join(e.cfg.AuditPath, leaseFileName) {
		t.Fatalf("defaults not applied: %+v", c)
	}
}

func TestAuditWriteFailureKeepsTheMarkers(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"t1", "t2", "t3"} {
		e.dueThread(id, 1, 2)
	}
	r := e.runner()
	var once bool
	r.hooks.beforeBatch = func(ctx context.Context, b batchPoint) {
		if !once {
			once = true
			// The audit file becomes unwritable under the run.
			if _, err := b.Audit.Close(audit.Footer{Status: audit.RunFailed}); err != nil {
				t.Errorf("close writer: %v", err)
			}
		}
	}
	res, err := r.Run(context.Background(), RunRequest{Trigger: TriggerCLI})
	if err == nil || res.Status != audit.RunFailed || !errors.Is(err, audit.ErrClosed) {
		t.Fatalf("run: %+v %v, want failed with the audit error", res, err)
	}
	if got := counterValue(t, e.metrics.Errors.WithLabelValues(stageAudit)); got < 1 {
		t.Fatalf("errors_total{stage=audit} = %v", got)
	}
	pending, err := e.st.PendingPurges(context.Background())
	if err != nil || len(pending) == 0 {
		t.Fatalf("markers cleared without durable audit records: %v %v", pending, err)
	}

	// The next run writes the missing records.
	r.hooks.beforeBatch = nil
	_, ra := e.run(r, RunRequest{Trigger: TriggerCLI})
	for _, m := range pending {
		if it := ra.item(t, m.ID); it.Status != audit.StatusPurged || !it.Recovered {
			t.Fatalf("record of %s: %+v", m.ID, it)
		}
	}
	for _, id := range []string{"t1", "t2", "t3"} {
		if e.exists(store.KindThread, id) {
			t.Fatalf("%s still exists", id)
		}
	}
}

func TestPurgesAreMadeDurableInGroups(t *testing.T) {
	e := newEnv(t)
	const n = 150
	e.bulk(func(b *store.Bulk) error {
		for i := range n {
			id := fmt.Sprintf("bulk%03d", i)
			del := t0.Add(-31*day + time.Duration(i)*time.Second).UnixNano()
			if err := b.PutThread(store.Thread{ID: id, CreatedTS: del - 1, UpdatedTS: del, Deleted: true, DeletedTS: del}); err != nil {
				return err
			}
		}
		return nil
	})
	r := e.runner()
	maxPending := 0
	r.hooks.beforeBatch = func(ctx context.Context, b batchPoint) {
		pending, err := e.st.PendingPurges(ctx)
		if err != nil {
			t.Errorf("pending purges: %v", err)
		}
		maxPending = max(maxPending, len(pending))
	}
	res, ra := e.run(r, RunRequest{Trigger: TriggerCLI})
	if res.Purged != n || len(ra.Items) != n {
		t.Fatalf("purged %d, %d records, want %d", res.Purged, len(ra.Items), n)
	}
	// Markers are cleared group by group: at most one group plus the item
	// being purged are pending at any batch boundary.
	if maxPending == 0 || maxPending > flushItems+1 {
		t.Fatalf("at most %d markers pending, want between 1 and %d", maxPending, flushItems+1)
	}
}

func TestLongRunsLogProgress(t *testing.T) {
	e := newEnv(t)
	e.cfg.MaxItems = 10
	for _, id := range []string{"p1", "p2", "p3", "p4"} {
		e.dueThread(id, 1, 1)
	}
	r := e.runner()
	r.hooks.beforeBatch = func(context.Context, batchPoint) {
		e.clock.Advance(6 * time.Second) // each item takes a while
	}
	e.run(r, RunRequest{Trigger: TriggerCLI})
	var lines []map[string]any
	for _, l := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(l, `"msg":"retention_run_progress"`) {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, m)
		}
	}
	if len(lines) == 0 {
		t.Fatalf("no progress line in a run of %s:\n%s", 4*6*time.Second, e.logs.String())
	}
	p := lines[0]
	if p["items_done"] == nil || p["rate_per_sec"] == nil || p["time_left_ms"] == nil {
		t.Fatalf("progress line %v lacks items_done, rate_per_sec or time_left", p)
	}
}

func TestRecoverSealsAbandonedFilesOnlyUnderTheLease(t *testing.T) {
	e := newEnv(t)
	e.at(31 * day)
	if _, err := audit.Create(e.cfg.AuditPath, "abandoned02", audit.Header{StartedAt: e.clock.Now().Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	r := e.runner()

	// Another owner holds the lease: its files are not ours to seal.
	other, err := AcquireLease(context.Background(), LeaseConfig{Path: e.cfg.LeasePath, TTL: e.cfg.LeaseTTL,
		Owner: "other", Host: "other-host", PID: 1, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if sealed, err := r.Recover(context.Background()); err != nil || len(sealed) != 0 {
		t.Fatalf("with the lease held elsewhere: sealed %v, err %v", sealed, err)
	}
	if err := other.Release(); err != nil {
		t.Fatal(err)
	}

	sealed, err := r.Recover(context.Background())
	if err != nil || len(sealed) != 1 {
		t.Fatalf("sealed %v, err %v", sealed, err)
	}
	rep, err := audit.VerifyDir(e.cfg.AuditPath)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Files != 1 || rep.Verified != 1 || len(rep.InProgress) != 0 {
		t.Fatalf("report %+v", rep)
	}
	if _, err := ReadLease(e.cfg.LeasePath); err != nil {
		t.Fatalf("lease after recover: %v", err)
	}
}

// A stamp follows the rule of purges (spec §5): at any instant after the
// stamp is committed, either its audit record is durable or a marker in the
// store lets the next run write it. The check runs at the first batch
// boundary after the stamp, where a kill -9 would lose the records still
// buffered in the audit writer.
func TestStampIsRecordedEvenIfTheRunDiesBeforeTheAuditSync(t *testing.T) {
	e := newEnv(t)
	e.bulk(func(b *store.Bulk) error {
		return b.PutThread(store.Thread{ID: "legacy", Title: "x", CreatedTS: 1, UpdatedTS: 2, Deleted: true})
	})
	e.dueThread("due", 2, 2)
	r := e.runner()
	checked := false
	r.hooks.beforeBatch = func(ctx context.Context, b batchPoint) {
		if checked {
			return
		}
		checked = true
		th, err := e.st.GetThread(ctx, "legacy")
		if err != nil || th.DeletedTS == 0 {
			t.Errorf("legacy thread not stamped before the first purge batch: %+v %v", th, err)
			return
		}
		onDisk, err := os.ReadFile(b.Audit.Path())
		if err != nil {
			t.Errorf("read audit file: %v", err)
			return
		}
		stamps, err := e.st.PendingStamps(ctx)
		if err != nil {
			t.Errorf("pending stamps: %v", err)
			return
		}
		if !strings.Contains(string(onDisk), `"item_id":"legacy"`) && len(stamps) != 1 {
			t.Errorf("a crash now would lose the stamp's record: not in the file on disk, %d stamp markers", len(stamps))
		}
	}
	_, ra := e.run(r, RunRequest{Trigger: TriggerCLI})
	if !checked {
		t.Fatal("the run reached no batch boundary")
	}
	if it := ra.item(t, "legacy"); it.Status != audit.StatusStamped || it.Recovered {
		t.Fatalf("record of the stamp: %+v", it)
	}
	if stamps, err := e.st.PendingStamps(context.Background()); err != nil || len(stamps) != 0 {
		t.Fatalf("stamp markers left after the records were synced: %+v %v", stamps, err)
	}
}

// A stamp whose run died before its record was durable is recorded by the
// next run, marked recovered.
func TestRunRecordsAStampWhoseAuditRecordWasLost(t *testing.T) {
	e := newEnv(t)
	e.bulk(func(b *store.Bulk) error {
		return b.PutThread(store.Thread{ID: "legacy", Title: "x", CreatedTS: 1, UpdatedTS: 2, Deleted: true})
	})
	// What a run killed right after stamping leaves behind.
	stampedAt := t0.Add(-time.Hour).UnixNano()
	if err := e.st.StampDeletion(context.Background(), store.DeletionEntry{Kind: store.KindThread, ID: "legacy"}, stampedAt, "deadrun"); err != nil {
		t.Fatal(err)
	}
	_, ra := e.run(e.runner(), RunRequest{Trigger: TriggerCLI})
	it := ra.item(t, "legacy")
	if it.Status != audit.StatusStamped || !it.Recovered || !it.DeletedAt.Equal(time.Unix(0, stampedAt).UTC()) ||
		!strings.Contains(it.Reason, "deadrun") {
		t.Fatalf("recovered record: %+v", it)
	}
	if stamps, err := e.st.PendingStamps(context.Background()); err != nil || len(stamps) != 0 {
		t.Fatalf("stamp markers left: %+v %v", stamps, err)
	}
}
