package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
)

// runDryAndReal seeds due threads, runs a dry run and a real run, and
// returns the real run's result and a thread it purged.
func runDryAndReal(t *testing.T, h *harness) (retention.Result, string) {
	t.Helper()
	h.seedDue()
	h.mustRun("retention", "run", "--dry-run")
	var res retention.Result
	if err := json.Unmarshal([]byte(h.mustRun("retention", "run", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	r, err := audit.Open(res.AuditFile)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		rec, err := r.Next()
		if err != nil {
			t.Fatalf("no purged thread in %s: %v", res.AuditFile, err)
		}
		if it := rec.Item; it != nil && it.ItemType == audit.ItemThread && it.Status == audit.StatusPurged {
			return res, it.ItemID
		}
	}
}

func TestAuditShowPrintsHeaderItemsAndFooter(t *testing.T) {
	h := newHarness(t)
	res, tid := runDryAndReal(t, h)

	out := h.mustRun("audit", "show", res.AuditFile)
	for _, want := range []string{
		"run:        " + res.RunID + ", purge",
		"policy:     period 30d, message period 30d",
		"LINE  TYPE",
		tid,
		"status:     completed",
		"counts:     scanned ",
		"erased:     yes",
		"verifies:   yes",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("audit show lacks %q:\n%s", want, out)
		}
	}
	if out := h.mustRun("audit", "show", res.AuditFile, "--status", "failed"); !strings.Contains(out, "none with status failed") {
		t.Errorf("--status failed:\n%s", out)
	}

	// A file still in progress: no footer, not judged, exit 1.
	data, err := os.ReadFile(res.AuditFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	inprogress := filepath.Join(t.TempDir(), filepath.Base(res.AuditFile)+".inprogress")
	if err := os.WriteFile(inprogress, bytes.Join(lines[:len(lines)-2], nil), 0o640); err != nil {
		t.Fatal(err)
	}
	code, out, _ := h.run("audit", "show", inprogress)
	if code != exitFailed || !strings.Contains(out, "footer:     none") || !strings.Contains(out, "not judged") {
		t.Errorf("in progress: exit %d\n%s", code, out)
	}

	// An edited item: the file is shown and named as failing, exit 1.
	lines[1] = bytes.Replace(lines[1], []byte(`"purged"`), []byte(`"failed"`), 1)
	if err := os.WriteFile(res.AuditFile, bytes.Join(lines, nil), 0o640); err != nil {
		t.Fatal(err)
	}
	code, out, _ = h.run("audit", "show", res.AuditFile)
	if code != exitFailed || !strings.Contains(out, "FAIL "+res.AuditFile) {
		t.Errorf("edited: exit %d\n%s", code, out)
	}

	for _, args := range [][]string{{"audit", "show"}, {"audit", "show", "a", "b"}} {
		if code, _, _ := h.run(args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
	if code, _, _ := h.run("audit", "show", filepath.Join(t.TempDir(), "missing.jsonl")); code != exitFailed {
		t.Errorf("missing file: exit %d", code)
	}
}

// audit find answers whether an item was purged, when, why, and which
// file proves it, with every record of it (the dry run's too), oldest
// first; a proof whose file no longer verifies exits 1.
func TestAuditFindNamesTheProvingFile(t *testing.T) {
	h := newHarness(t)
	res, tid := runDryAndReal(t, h)

	var rep struct {
		ItemID   string     `json:"item_id"`
		Purged   bool       `json:"purged"`
		PurgedAt *string    `json:"purged_at"`
		Cause    string     `json:"cause"`
		Proof    *findMatch `json:"proof"`
		Records  []findMatch
		Problems []string `json:"problems"`
	}
	out := h.mustRun("audit", "find", tid, "--json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if !rep.Purged || rep.PurgedAt == nil || rep.Cause != "deleted" || rep.Proof == nil ||
		rep.Proof.File != res.AuditFile || rep.Proof.RunID != res.RunID || !rep.Proof.Verified || len(rep.Problems) != 0 {
		t.Fatalf("find --json:\n%s", out)
	}
	if len(rep.Records) != 2 || !rep.Records[0].DryRun || rep.Records[0].Item.Status != "dry_run" || rep.Records[1].Item.Status != "purged" {
		t.Fatalf("records, oldest first:\n%s", out)
	}

	out = h.mustRun("audit", "find", tid)
	for _, want := range []string{"thread " + tid + ": purged at ", "cause deleted", "proven by:  " + res.AuditFile + " line ", "verifies:   yes", "records (2):", "(dry run)"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit find lacks %q:\n%s", want, out)
		}
	}

	code, out, _ := h.run("audit", "find", "never-existed")
	if code != exitFailed || !strings.Contains(out, "no record of never-existed") {
		t.Errorf("unknown item: exit %d\n%s", code, out)
	}

	// The proving file's header edited: the record is still found, but the
	// file no longer proves it.
	data, err := os.ReadFile(res.AuditFile)
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(data, []byte(`"batch_size":1000`), []byte(`"batch_size":999`), 1)
	if bytes.Equal(edited, data) {
		t.Fatal("no batch_size in the header")
	}
	if err := os.WriteFile(res.AuditFile, edited, 0o640); err != nil {
		t.Fatal(err)
	}
	code, out, _ = h.run("audit", "find", tid, filepath.Join(h.dbPath, "purge_audit"))
	if code != exitFailed || !strings.Contains(out, "verifies:   NO") || !strings.Contains(out, "FAIL "+res.AuditFile) {
		t.Errorf("edited proof: exit %d\n%s", code, out)
	}
	if code, _, _ := h.run("audit", "find"); code != exitUsage {
		t.Errorf("no ID: exit %d", code)
	}
}

type findMatch struct {
	File     string `json:"file"`
	RunID    string `json:"run_id"`
	DryRun   bool   `json:"dry_run"`
	Verified bool   `json:"verified"`
	Item     struct {
		Status string `json:"status"`
	} `json:"item"`
}
