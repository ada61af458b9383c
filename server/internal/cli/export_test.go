package cli

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
)

// writeExport writes an export file holding one record per item ID, each
// a thread with one message of two versions; the last ID's record is
// written twice, the second time as recovered; each message has two
// attachments.
func writeExport(t *testing.T, ids ...string) string {
	t.Helper()
	w, err := audit.NewExportWriter(t.TempDir(), "run1", time.Date(2025, 3, 1, 2, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	write := func(id string, recovered bool) {
		it, err := w.Begin(audit.ExportHead{ItemType: audit.ItemThread, ItemID: id, ThreadID: id, Cause: "deleted",
			ExportedAt: time.Date(2025, 3, 1, 2, 0, 1, 0, time.UTC), Recovered: recovered})
		if err != nil {
			t.Fatal(err)
		}
		_ = it.Thread([]byte(`{"id":"` + id + `","title":"T","deleted":true}`))
		_ = it.Message(id + "-m1")
		_ = it.Version([]byte(`{"id":"` + id + `-m1","thread":"` + id + `","body":"v1","version":1}`))
		_ = it.Version([]byte(`{"id":"` + id + `-m1","thread":"` + id + `","body":"v2","version":2}`))
		// An attachment with its bytes, and one whose blob was gone.
		_ = it.Attachment(audit.AttachmentMeta{ID: id + "-a1", Thread: id, Message: id + "-m1", Size: 3, Filename: "a.txt"},
			strings.NewReader("abc"))
		_ = it.Attachment(audit.AttachmentMeta{ID: id + "-a2", Thread: id, Message: id + "-m1", Size: 9}, nil)
		if err := it.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		write(id, false)
	}
	write(ids[len(ids)-1], true)
	sum, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	return sum.Path
}

func TestExportReadPrintsRecords(t *testing.T) {
	h := newHarness(t)
	path := writeExport(t, "t1", "t2", "t3")

	// Without --item: exactly the file's JSON lines.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	if out := h.mustRun("export", "read", path); out != string(plain) {
		t.Fatalf("export read:\n%s\nwant the file's lines:\n%s", out, plain)
	}

	out := h.mustRun("export", "read", "--item", "t2", path)
	var rec audit.ExportRecord
	if err := json.Unmarshal([]byte(out), &rec); err != nil || strings.Count(out, "\n") != 1 {
		t.Fatalf("one record as one JSON line, got %q (%v)", out, err)
	}
	if rec.ItemID != "t2" || len(rec.Messages) != 1 || len(rec.Messages[0].Versions) != 2 {
		t.Fatalf("record %+v", rec)
	}
	// Both records of an item exported twice, the second one recovered.
	out = h.mustRun("export", "read", path, "--item", "t3")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 ||
		strings.Contains(lines[0], `"recovered"`) || !strings.Contains(lines[1], `"recovered":true`) {
		t.Fatalf("item t3:\n%s", out)
	}

	if code, _, errOut := h.run("export", "read", path, "--item", "nope"); code != exitFailed || !strings.Contains(errOut, `no record of item "nope"`) {
		t.Fatalf("unknown item: exit %d, %s", code, errOut)
	}
	if code, _, _ := h.run("export", "read"); code != exitUsage {
		t.Fatalf("no file: exit %d", code)
	}
	notGzip := filepath.Join(t.TempDir(), "x.jsonl.gz")
	_ = os.WriteFile(notGzip, []byte("{}\n"), 0o600)
	if code, _, errOut := h.run("export", "read", notGzip); code != exitFailed || !strings.Contains(errOut, "not a gzip file") {
		t.Fatalf("not gzip: exit %d, %s", code, errOut)
	}
}

// The whole path on the command line: a run with export on purges, the
// export holds every purged item, audit verify checks the export through
// the footer, export read finds one item, and a changed export fails
// verification.
func TestRetentionRunExportsAndVerifies(t *testing.T) {
	exports := filepath.Join(t.TempDir(), "exports")
	h := newHarness(t, "PROGRESSDB_RETENTION_EXPORT_PATH="+exports)
	h.seedDue()

	var res retention.Result
	if err := json.Unmarshal([]byte(h.mustRun("retention", "run", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != "completed" || res.Purged == 0 {
		t.Fatalf("run %+v", res)
	}
	r, err := audit.Open(res.AuditFile)
	if err != nil {
		t.Fatal(err)
	}
	var footer *audit.Footer
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if rec.Footer != nil {
			footer = rec.Footer
		}
	}
	r.Close()
	if footer == nil || footer.Exported == nil || *footer.Exported != res.Purged || !strings.HasPrefix(footer.ExportFile, exports) {
		t.Fatalf("footer %+v, run %+v", footer, res)
	}
	auditDir := filepath.Join(h.dbPath, "purge_audit")
	if out := h.mustRun("audit", "verify", auditDir); !strings.Contains(out, "1 of 1 sealed audit files verify") {
		t.Fatalf("verify: %s", out)
	}

	all := h.mustRun("export", "read", footer.ExportFile)
	if n := int64(strings.Count(all, "\n")); n != res.Purged {
		t.Fatalf("export read printed %d records, %d purged", n, res.Purged)
	}
	var first audit.ExportRecord
	if err := json.Unmarshal([]byte(all[:strings.IndexByte(all, '\n')]), &first); err != nil {
		t.Fatal(err)
	}
	one := h.mustRun("export", "read", footer.ExportFile, "--item", first.ItemID)
	var rec audit.ExportRecord
	if err := json.Unmarshal([]byte(one), &rec); err != nil || rec.ItemID != first.ItemID || len(rec.Messages) == 0 ||
		len(rec.Messages[0].Versions) != 2 || rec.Thread == nil {
		t.Fatalf("export read --item %s: %+v (%v)", first.ItemID, rec, err)
	}

	// One changed byte in the export: verification fails, naming it.
	data, err := os.ReadFile(footer.ExportFile)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x01
	if err := os.WriteFile(footer.ExportFile, data, 0o640); err != nil {
		t.Fatal(err)
	}
	code, out, _ := h.run("audit", "verify", auditDir)
	if code != exitFailed || !strings.Contains(out, footer.ExportFile) {
		t.Fatalf("verify of a changed export: exit %d\n%s", code, out)
	}
}

// Without DIR, audit verify walks the configured export folder too: an
// export no footer names is checked, and strays are reported.
func TestAuditVerifyWalksTheExportFolder(t *testing.T) {
	exports := filepath.Join(t.TempDir(), "exports")
	h := newHarness(t, "PROGRESSDB_RETENTION_EXPORT_PATH="+exports)
	h.seedDue()
	h.mustRun("retention", "run")
	if out := h.mustRun("audit", "verify"); !strings.Contains(out, "1 of 1 sealed export files decompress whole") {
		t.Fatalf("verify: %s", out)
	}
	// An aborted run's export (named by no footer), cut short; a stray file.
	month := filepath.Join(exports, "2025-03")
	if err := os.MkdirAll(month, 0o750); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(month, "export-20250301T020000Z-abc.jsonl.gz")
	good := writeExport(t, "t1")
	data, _ := os.ReadFile(good)
	if err := os.WriteFile(orphan, data[:len(data)-5], 0o640); err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(month, "notes.txt")
	if err := os.WriteFile(stray, []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	code, out, _ := h.run("audit", "verify")
	if code != exitFailed || !strings.Contains(out, orphan) || !strings.Contains(out, stray+":0: not an export file") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	// Naming only the audit folder leaves exports out, as before.
	if out := h.mustRun("audit", "verify", filepath.Join(h.dbPath, "purge_audit")); strings.Contains(out, "export files") {
		t.Fatalf("verify DIR: %s", out)
	}
}
