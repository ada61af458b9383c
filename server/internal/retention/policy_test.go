package retention

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

func TestHeaderRecordsThePoliciesInForce(t *testing.T) {
	e := newEnv(t)
	e.cfg.MaxAge = 90 * day
	e.cfg.MaxMessages = 500
	e.thread("t1", 1, 1)
	e.thread("t2", 1, 1)
	e.thread("t3", 1, 1)
	r := e.runner()
	ctx := context.Background()
	for _, tid := range []string{"t1", "t2"} {
		if _, err := r.SetThreadPolicy(ctx, tid, PolicyOverride{MaxAge: ptr("7d")}); err != nil {
			t.Fatal(err)
		}
	}
	_, ra := e.run(r, RunRequest{DryRun: true, Trigger: TriggerCLI})
	if h := ra.Header; h.MaxAge != "90d" || h.MaxMessages != 500 || h.PolicyOverrides != 2 {
		t.Fatalf("header %+v", h)
	}
	if err := r.ClearThreadPolicy(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	e.cfg.MaxAge, e.cfg.MaxMessages = 0, 0
	_, ra = e.run(e.runner(), RunRequest{DryRun: true, Trigger: TriggerCLI})
	if h := ra.Header; h.MaxAge != "0" || h.MaxMessages != 0 || h.PolicyOverrides != 1 {
		t.Fatalf("header after clearing %+v", h)
	}
}

func TestItemsCarryTheirCauseAndRunsCountByCause(t *testing.T) {
	e := newEnv(t)
	mids := e.thread("t1", 2, 1)
	e.thread("t2", 1, 1)
	e.deleteMessage("t1", mids[0])
	e.deleteThread("t2")
	e.at(31 * day)
	r := e.runner()
	res, ra := e.run(r, RunRequest{Trigger: TriggerSchedule})
	for _, id := range []string{mids[0], "t2"} {
		if it := ra.item(t, id); it.Cause != audit.CauseDeleted || it.Status != audit.StatusPurged {
			t.Fatalf("record %+v", it)
		}
	}
	if cc := res.ByCause[audit.CauseDeleted]; cc.Purged != 2 || cc.Eligible != 2 || len(res.ByCause) != 1 {
		t.Fatalf("by cause %+v", res.ByCause)
	}
	if got := counterValue(t, e.metrics.ItemsPurged.WithLabelValues("message", audit.CauseDeleted)); got != 1 {
		t.Fatalf("items_purged_total{message,deleted} = %v", got)
	}
}

func TestRecoveredRecordKeepsTheMarkersCause(t *testing.T) {
	e := newEnv(t)
	mids := e.thread("t1", 1, 1)
	e.deleteMessage("t1", mids[0])
	e.at(31 * day)
	ctx := context.Background()
	m, err := e.st.GetMessage(ctx, "t1", mids[0])
	if err != nil {
		t.Fatal(err)
	}
	// A crashed run claimed the message for max_messages and purged it,
	// but its record was lost.
	mk := store.PurgeMarker{Kind: store.KindMessage, ID: mids[0], ThreadID: "t1", DeletedTS: m.DeletedTS,
		RunID: "crashed", Cause: audit.CauseMaxMessages}
	if err := e.st.BeginPurge(ctx, mk); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.PurgeMessage(ctx, "t1", mids[0], store.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	res, ra := e.run(e.runner(), RunRequest{Trigger: TriggerSchedule})
	if it := ra.item(t, mids[0]); !it.Recovered || it.Cause != audit.CauseMaxMessages || it.Status != audit.StatusPurged {
		t.Fatalf("recovered record %+v", it)
	}
	if res.ByCause[audit.CauseMaxMessages].Purged != 1 {
		t.Fatalf("by cause %+v", res.ByCause)
	}
}

// msgsAt creates n live messages in tid, one a day from t0+from, named
// <tid>-d<day>.
func (e *env) msgsAt(tid string, from time.Duration, n int) []string {
	e.t.Helper()
	var ids []string
	for i := range n {
		e.at(from + time.Duration(i)*day)
		m, err := e.st.AppendMessage(context.Background(), tid, store.Message{ID: fmt.Sprintf("%s-d%d", tid, int(from/day)+i), Body: json.RawMessage(`"secret"`)})
		if err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	return ids
}

// causes maps the items of an audit file with status to their causes.
func (ra runAudit) causes(status string) map[string]string {
	out := map[string]string{}
	for _, it := range ra.Items {
		if it.Status == status {
			out[it.ItemID] = it.Cause
		}
	}
	return out
}

func TestMaxAgeAndOverrides(t *testing.T) {
	e := newEnv(t)
	e.cfg.MaxAge = 90 * day
	ctx := context.Background()
	for _, tid := range []string{"plain", "short", "off", "held", "gone"} {
		e.thread(tid, 0, 1)
	}
	old := map[string][]string{}
	for _, tid := range []string{"plain", "short", "off", "held", "gone"} {
		old[tid] = e.msgsAt(tid, 0, 2) // days 0 and 1
	}
	recent := e.msgsAt("short", 95*day, 1) // day 95: 10 days old at day 105
	e.at(105 * day)
	r := e.runner()
	if _, err := r.SetThreadPolicy(ctx, "short", PolicyOverride{MaxAge: ptr("7d")}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SetThreadPolicy(ctx, "off", PolicyOverride{MaxAge: ptr("0")}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.SetLegalHold(ctx, "held", true); err != nil {
		t.Fatal(err)
	}
	e.deleteThread("gone") // kept whole for its restore window

	want := map[string]string{}
	for _, tid := range []string{"plain", "short"} {
		for _, mid := range old[tid] {
			want[mid] = audit.CauseMaxAge
		}
	}
	want[recent[0]] = audit.CauseMaxAge // 10 days old, over short's 7d

	dry, ra := e.run(r, RunRequest{DryRun: true, Trigger: TriggerCLI})
	if got := ra.causes(audit.StatusDryRun); !maps.Equal(got, want) {
		t.Fatalf("dry run previews %v, want %v", got, want)
	}
	if it := ra.item(t, "held"); it.Status != audit.StatusSkipped || it.Reason != reasonLegalHold || it.Cause != audit.CauseMaxAge {
		t.Fatalf("held thread record %+v", it)
	}
	res, ra := e.run(r, RunRequest{Trigger: TriggerSchedule})
	if got := ra.causes(audit.StatusPurged); !maps.Equal(got, want) {
		t.Fatalf("run purged %v, want %v", got, want)
	}
	if res.ByCause[audit.CauseMaxAge].Purged != int64(len(want)) || dry.ByCause[audit.CauseMaxAge].Eligible != int64(len(want)) {
		t.Fatalf("by cause: run %+v, dry %+v", res.ByCause, dry.ByCause)
	}
	for mid := range want {
		if e.exists(store.KindMessage, mid) {
			t.Fatalf("%s still exists", mid)
		}
	}
	for _, tid := range []string{"off", "held", "gone"} {
		for _, mid := range old[tid] {
			if !e.exists(store.KindMessage, mid) {
				t.Fatalf("%s of %s was purged", mid, tid)
			}
		}
	}
	if got := counterValue(t, e.metrics.ItemsPurged.WithLabelValues("message", audit.CauseMaxAge)); got != float64(len(want)) {
		t.Fatalf("items_purged_total{message,max_age} = %v", got)
	}
	// Nothing more is due: the next run purges nothing.
	res, _ = e.run(r, RunRequest{Trigger: TriggerSchedule})
	if res.Purged != 0 {
		t.Fatalf("second run purged %d", res.Purged)
	}
	checkIndexes(t, e)
}

func TestMaxMessagesKeepsTheNewestAndRecordsEachItemOnce(t *testing.T) {
	e := newEnv(t)
	e.cfg.MaxMessages = 3
	e.cfg.MaxAge = 30 * day
	ctx := context.Background()
	e.thread("t", 0, 1)
	e.thread("small", 0, 1)
	ids := e.msgsAt("t", 0, 6) // days 0..5
	e.msgsAt("small", 0, 2)
	e.at(20 * day) // nothing is 30 days old yet
	r := e.runner()
	if _, err := e.st.DeleteMessage(ctx, "t", ids[5]); err != nil {
		t.Fatal(err)
	}
	// t: 5 live (d0..d4), cap 3: d0 and d1 go.
	_, ra := e.run(r, RunRequest{DryRun: true, Trigger: TriggerCLI})
	want := map[string]string{ids[0]: audit.CauseMaxMessages, ids[1]: audit.CauseMaxMessages}
	if got := ra.causes(audit.StatusDryRun); !maps.Equal(got, want) {
		t.Fatalf("dry run %v, want %v", got, want)
	}
	// At day 33, d0..d2 are past max_age too; max_age takes them first,
	// and max_messages then has nothing left to take (2 live ≤ 3).
	e.at(33 * day)
	_, ra = e.run(r, RunRequest{DryRun: true, Trigger: TriggerCLI})
	want = map[string]string{ids[0]: audit.CauseMaxAge, ids[1]: audit.CauseMaxAge, ids[2]: audit.CauseMaxAge,
		"small-d0": audit.CauseMaxAge, "small-d1": audit.CauseMaxAge}
	if got := ra.causes(audit.StatusDryRun); !maps.Equal(got, want) {
		t.Fatalf("dry run with both policies %v, want %v", got, want)
	}
	e.at(25 * day)
	_, ra = e.run(r, RunRequest{Trigger: TriggerSchedule})
	want = map[string]string{ids[0]: audit.CauseMaxMessages, ids[1]: audit.CauseMaxMessages}
	if got := ra.causes(audit.StatusPurged); !maps.Equal(got, want) {
		t.Fatalf("run %v, want %v", got, want)
	}
	if n, _ := e.st.LiveCount(ctx, "t"); n != 3 {
		t.Fatalf("live count after the run %d", n)
	}
	// An override lifts the cap for one thread; clearing it restores it.
	if _, err := r.SetThreadPolicy(ctx, "t", PolicyOverride{MaxMessages: ptr(1)}); err != nil {
		t.Fatal(err)
	}
	_, ra = e.run(r, RunRequest{Trigger: TriggerSchedule})
	if got := ra.causes(audit.StatusPurged); len(got) != 2 || got[ids[2]] != audit.CauseMaxMessages || got[ids[3]] != audit.CauseMaxMessages {
		t.Fatalf("override run %v", got)
	}
	checkIndexes(t, e)
}

func TestInterruptedPolicyPurgeIsFinishedWithItsCause(t *testing.T) {
	e := newEnv(t)
	e.cfg.MaxAge = 10 * day
	e.cfg.BatchSize = 2
	e.thread("t", 0, 1)
	ids := e.msgsAt("t", 0, 3)
	ctx := context.Background()
	for _, id := range ids {
		for v := range 3 {
			if _, err := e.st.EditMessage(ctx, "t", id, json.RawMessage(fmt.Sprintf(`"v%d"`, v))); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.at(20 * day)
	r := e.runner()
	cctx, cancel := context.WithCancel(ctx)
	r.hooks.beforeBatch = func(_ context.Context, b batchPoint) {
		if b.N == 3 {
			cancel()
		}
	}
	res, err := r.Run(cctx, RunRequest{Trigger: TriggerSchedule})
	if err != nil {
		t.Fatal(err)
	}
	ra := e.audit(res)
	if ra.Footer.Status != audit.RunInterrupted {
		t.Fatalf("footer %+v", ra.Footer)
	}
	r.hooks.beforeBatch = nil
	_, ra2 := e.run(r, RunRequest{Trigger: TriggerSchedule})
	purged := ra.causes(audit.StatusPurged)
	for k, v := range ra2.causes(audit.StatusPurged) {
		if _, dup := purged[k]; dup {
			t.Fatalf("%s recorded purged twice", k)
		}
		purged[k] = v
	}
	for _, id := range ids {
		if purged[id] != audit.CauseMaxAge || e.exists(store.KindMessage, id) {
			t.Fatalf("%s: cause %q, exists %v (first %+v, second %+v)", id, purged[id], e.exists(store.KindMessage, id), ra.Items, ra2.Items)
		}
	}
	checkIndexes(t, e)
}

// checkIndexes fails unless the store's indexes equal a full rebuild.
func checkIndexes(t *testing.T, e *env) {
	t.Helper()
	snapshot := func() map[string]string {
		out := e.keys("idx:")
		for k, v := range e.keys("thread:") {
			if strings.HasSuffix(k, ":count") {
				out[k] = v
			}
		}
		return out
	}
	before := snapshot()
	if _, err := e.st.RebuildDeletionIndex(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(); !maps.Equal(before, after) {
		t.Fatalf("indexes differ from a rebuild:\nkept    %v\nrebuilt %v", before, after)
	}
}
