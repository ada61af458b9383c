package retention

import (
	"context"
	"testing"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// formatRecords returns the headers of the trail's format records.
func formatRecords(t *testing.T, root string) []audit.Header {
	t.Helper()
	steps, _, err := audit.Steps(root, audit.Head{})
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Header
	for _, st := range steps {
		if st.Header != nil && st.Header.Trigger == audit.TriggerFormat {
			out = append(out, *st.Header)
		}
	}
	return out
}

// checkTrail fails unless the trail verifies whole.
func checkTrail(t *testing.T, root string) {
	t.Helper()
	rep, err := audit.VerifyDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verified != rep.Files || len(rep.Problems) != 0 || len(rep.InProgress) != 0 {
		t.Fatalf("audit verify: %+v", rep)
	}
}

// The raise sealing makes at open is owed to the trail until a record of
// it is written, once: a stop between the record and the store forgetting
// it (the hook panics there) leaves it owed, and the next call finds the
// record and writes none again. A purge run after it is not misled: the
// record purged nothing, and the chain verifies.
func TestFormatRaiseRecordedOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.thread("a", 1, 1)
	sealEnv(e, nil)
	owed, err := e.st.OwedRaises(ctx)
	if err != nil || len(owed) != 1 || owed[0].From != store.FormatBase || owed[0].To != store.FormatSealed || owed[0].Reason != "sealing" {
		t.Fatalf("owed after sealing: %+v %v, want one raise from 1 to 2 by sealing", owed, err)
	}
	r := e.runner()
	r.hooks.afterRaiseRecord = func(context.Context, store.FormatRaise) { panic("stopped") }
	func() {
		defer func() {
			if p := recover(); p != "stopped" {
				t.Fatalf("recover = %v, want the hook's stop", p)
			}
		}()
		_ = r.RecordRaises(ctx)
	}()
	if got := formatRecords(t, e.cfg.AuditPath); len(got) != 1 {
		t.Fatalf("%d format records after the stop, want 1", len(got))
	}
	if owed, err := e.st.OwedRaises(ctx); err != nil || len(owed) != 1 {
		t.Fatalf("owed after the stop: %+v %v, want still owed", owed, err)
	}

	r = e.runner()
	if err := r.RecordRaises(ctx); err != nil {
		t.Fatal(err)
	}
	got := formatRecords(t, e.cfg.AuditPath)
	dbID, _ := e.st.DatabaseID(ctx, false)
	if len(got) != 1 || got[0].FormatFrom != 1 || got[0].FormatTo != 2 || got[0].DatabaseID != dbID || dbID == "" {
		t.Fatalf("format records %+v, want one from 1 to 2 naming database %q", got, dbID)
	}
	if owed, err := e.st.OwedRaises(ctx); err != nil || len(owed) != 0 {
		t.Fatalf("owed after recording: %+v %v, want none", owed, err)
	}
	// The trail's readers see no run yet: the missed-run check and the
	// last success pass over the record.
	for _, id := range []string{"", dbID} {
		if sum, err := audit.LastRunOf(e.cfg.AuditPath, id); err != nil || sum != nil {
			t.Fatalf("last run of %q: %+v %v, want none", id, sum, err)
		}
		if sum, err := audit.LastCompletedOf(e.cfg.AuditPath, id); err != nil || sum != nil {
			t.Fatalf("last completed run of %q: %+v %v, want none", id, sum, err)
		}
	}
	if err := r.RecordRaises(ctx); err != nil || len(formatRecords(t, e.cfg.AuditPath)) != 1 {
		t.Fatalf("a call with nothing owed: %v, %d records", err, len(formatRecords(t, e.cfg.AuditPath)))
	}
	res, _ := e.run(r, RunRequest{Trigger: TriggerAdmin})
	if res.Status != resultCompleted {
		t.Fatalf("run after the record: %+v", res)
	}
	checkTrail(t, e.cfg.AuditPath)
}

// Recover, which the server calls at every start, writes an owed raise;
// encrypt-existing writes the raise of the sealing it finishes.
func TestFormatRaiseRecordedAtRecoverAndEncrypt(t *testing.T) {
	ctx := context.Background()
	for _, way := range []string{"recover", "encrypt-existing"} {
		t.Run(way, func(t *testing.T) {
			e := newEnv(t)
			plainThenSealed(e, 2)
			r := e.runner()
			switch way {
			case "recover":
				if _, err := r.Recover(ctx); err != nil {
					t.Fatal(err)
				}
			default:
				if _, err := r.EncryptExisting(ctx, EncryptRequest{}); err != nil {
					t.Fatal(err)
				}
			}
			if got := formatRecords(t, e.cfg.AuditPath); len(got) != 1 || got[0].FormatTo != int(store.FormatSealed) {
				t.Fatalf("format records %+v, want one raise to 2", got)
			}
			if owed, err := e.st.OwedRaises(ctx); err != nil || len(owed) != 0 {
				t.Fatalf("owed: %+v %v, want none", owed, err)
			}
			checkTrail(t, e.cfg.AuditPath)
		})
	}
}
