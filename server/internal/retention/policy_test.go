package retention

import (
	"context"
	"testing"

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
