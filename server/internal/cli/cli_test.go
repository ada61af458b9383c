package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/testtools"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// harness runs commands through Main with a private environment.
type harness struct {
	t       *testing.T
	dbPath  string
	environ []string
}

func newHarness(t *testing.T, extra ...string) *harness {
	t.Helper()
	db := filepath.Join(t.TempDir(), "data")
	env := append([]string{
		"PROGRESSDB_DB_PATH=" + db,
		"PROGRESSDB_LOG_FORMAT=json",
		"PROGRESSDB_LOG_LEVEL=warn",
		"PROGRESSDB_RETENTION_ENABLED=true",
	}, extra...)
	return &harness{t: t, dbPath: db, environ: env}
}

func (h *harness) run(args ...string) (code int, stdout, stderr string) {
	h.t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, h.environ, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func (h *harness) mustRun(args ...string) string {
	h.t.Helper()
	code, out, errOut := h.run(args...)
	if code != exitOK {
		h.t.Fatalf("%v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
	}
	return out
}

// createDB creates an empty database at the harness's path: only serve
// and seed create one, every other command needs one there.
func (h *harness) createDB() {
	h.t.Helper()
	st, err := store.Open(h.dbPath, store.Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		h.t.Fatal(err)
	}
}

// seedDue writes threads deleted 40 days ago (due under the default 30d).
func (h *harness) seedDue() {
	h.mustRun("seed", "--threads", "20", "--messages", "5", "--versions", "2", "--deleted", "0.5", "--deleted-age", "40d")
}

func TestRetentionRunPurgesAndPrintsJSON(t *testing.T) {
	h := newHarness(t)
	h.seedDue()

	var dry retention.Result
	if err := json.Unmarshal([]byte(h.mustRun("retention", "run", "--dry-run", "--json")), &dry); err != nil {
		t.Fatal(err)
	}
	if !dry.DryRun || dry.Purged != 0 || dry.Eligible == 0 || dry.Status != "completed" {
		t.Fatalf("dry run result %+v", dry)
	}

	var res retention.Result
	if err := json.Unmarshal([]byte(h.mustRun("retention", "run", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	if res.Purged != dry.Eligible || res.KeysDeleted == 0 || res.AuditFile == "" {
		t.Fatalf("run result %+v after dry run %+v", res, dry)
	}
	if _, err := os.Stat(res.AuditFile); err != nil {
		t.Fatalf("audit file: %v", err)
	}
	if out := h.mustRun("audit", "verify", filepath.Join(h.dbPath, "purge_audit")); !strings.Contains(out, "2 of 2 sealed audit files verify") {
		t.Fatalf("verify output: %s", out)
	}
}

// PROGRESSDB_RETENTION_ENABLED switches the scheduler; a run by hand
// does not need it.
func TestRetentionRunDoesNotNeedEnabled(t *testing.T) {
	h := newHarness(t, "PROGRESSDB_RETENTION_ENABLED=false")
	h.seedDue()
	if code, _, errOut := h.run("retention", "run", "--dry-run"); code != exitOK {
		t.Fatalf("dry run while disabled: exit %d, stderr %q", code, errOut)
	}
	code, rep, errOut := runJSON(t, h)
	if code != exitOK || rep.Reason != "completed" || rep.Result == nil || rep.Purged == 0 || rep.DryRun {
		t.Fatalf("run while disabled: exit %d, %+v, stderr %q", code, rep, errOut)
	}
}

func TestRetentionRunExits75WhenTheLeaseIsHeld(t *testing.T) {
	h := newHarness(t)
	h.seedDue()
	lease, err := retention.AcquireLease(context.Background(), retention.LeaseConfig{
		Path: filepath.Join(h.dbPath, "purge_audit", "retention.lock"), TTL: time.Minute,
		Owner: "elsewhere/1/x", Host: "elsewhere", PID: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release()
	code, _, errOut := h.run("retention", "run")
	if code != exitLeaseHeld || !strings.Contains(errOut, "elsewhere/1/x") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// A server holds the database: the command says so at once and exits 1.
// Pebble's lock is per process, so the holder is a real child process.
func TestRetentionRunWhileAServerHoldsTheDatabase(t *testing.T) {
	if os.Getenv("PROGRESSDB_CLI_HOLD_DB") != "" {
		st, err := store.Open(os.Getenv("PROGRESSDB_CLI_HOLD_DB"), store.Options{})
		if err != nil {
			os.Exit(3)
		}
		defer st.Close()
		os.Stdout.WriteString("open\n")
		time.Sleep(time.Minute) // killed by the parent
		return
	}
	h := newHarness(t)
	h.seedDue()
	child := testtools.StartChild(t, "TestRetentionRunWhileAServerHoldsTheDatabase", "PROGRESSDB_CLI_HOLD_DB="+h.dbPath)
	if line, _ := child.Line(); line != "open" {
		t.Fatalf("child did not open the store: %q", line)
	}

	start := time.Now()
	code, _, errOut := h.run("retention", "run")
	if code != exitFailed || !strings.Contains(errOut, "running process") || !strings.Contains(errOut, "--server URL") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if time.Since(start) > 30*time.Second {
		t.Fatalf("the command waited for the database instead of failing at once")
	}
	code, rep, _ := runJSON(t, h, "--dry-run")
	if code != exitFailed || rep.Reason != "database_busy" || !strings.Contains(rep.Error, "PROGRESSDB_ADMIN_TOKEN") {
		t.Fatalf("--json while the database is busy: exit %d, %+v", code, rep)
	}
	// Without a token, status shows only what the server wrote to disk,
	// never this shell's configuration as if it were the server's.
	if out := h.mustRun("retention", "status", "--json"); !strings.Contains(out, `"source": "files"`) || strings.Contains(out, `"enabled"`) {
		t.Fatalf("status: %s", out)
	}
}

func TestInvalidConfigurationExits2WithOneLine(t *testing.T) {
	for _, args := range [][]string{{"config", "check"}, {"serve"}, {"retention", "run"}, {"retention", "status"}} {
		h := newHarness(t, "PROGRESSDB_RETENTION_PERIOD=5m")
		code, _, errOut := h.run(args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != exitUsage || len(lines) != 1 || !strings.Contains(errOut, "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}

func TestServeRefusesAnUnwritableAuditFolder(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, "PROGRESSDB_RETENTION_AUDIT_PATH="+filepath.Join(notDir, "audit"), "PROGRESSDB_ADDR=127.0.0.1:0")
	code, _, errOut := h.run("serve")
	if code != exitUsage || !strings.Contains(errOut, "PROGRESSDB_RETENTION_AUDIT_PATH") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestConfigCheckRedactsSecrets(t *testing.T) {
	h := newHarness(t, "PROGRESSDB_ADMIN_TOKEN=hunter2-admin", "PROGRESSDB_API_KEY=hunter2-key")
	out := h.mustRun("config", "check")
	if strings.Contains(out, "hunter2") || !strings.Contains(out, "PROGRESSDB_ADMIN_TOKEN=<redacted>") {
		t.Fatalf("config check output:\n%s", out)
	}
}

func TestAuditVerifyFailsOnATamperedFileNamingFileAndLine(t *testing.T) {
	h := newHarness(t)
	h.seedDue()
	var res retention.Result
	if err := json.Unmarshal([]byte(h.mustRun("retention", "run", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(res.AuditFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	lines[1] = bytes.Replace(lines[1], []byte(`"purged"`), []byte(`"failed"`), 1)
	if err := os.WriteFile(res.AuditFile, bytes.Join(lines, nil), 0o640); err != nil {
		t.Fatal(err)
	}
	code, out, _ := h.run("audit", "verify", filepath.Join(h.dbPath, "purge_audit"), "--json")
	if code != exitFailed || !strings.Contains(out, filepath.Base(res.AuditFile)) || !strings.Contains(out, `"line": 2`) {
		t.Fatalf("exit %d, output %s", code, out)
	}
}

// An older footer edited (completed → failed) in an unsigned tree: the
// report names the edited file at its footer line, and the summary does not
// say every file verifies. --json carries every key docs/audit.md lists,
// live included.
func TestAuditVerifyNamesAnEditedOlderFooter(t *testing.T) {
	h := newHarness(t)
	h.createDB()
	var files []string
	for i := range 2 {
		if i > 0 {
			time.Sleep(1100 * time.Millisecond) // file names hold the start to the second
		}
		var res retention.Result
		if err := json.Unmarshal([]byte(h.mustRun("retention", "run", "--json")), &res); err != nil {
			t.Fatal(err)
		}
		files = append(files, res.AuditFile)
	}
	audits := filepath.Join(h.dbPath, "purge_audit")
	_, out, _ := h.run("audit", "verify", audits, "--json")
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	for _, k := range []string{"files", "verified", "in_progress", "live", "quarantined", "other", "problems"} {
		if _, ok := rep[k]; !ok {
			t.Errorf("--json lacks %q: %s", k, out)
		}
	}

	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	footer := len(lines)
	lines[footer-1] = bytes.Replace(lines[footer-1], []byte(`"status":"completed"`), []byte(`"status":"failed"`), 1)
	if err := os.WriteFile(files[0], append(bytes.Join(lines, nil), '\n'), 0o640); err != nil {
		t.Fatal(err)
	}
	code, out, _ := h.run("audit", "verify", audits)
	if want := fmt.Sprintf("FAIL %s:%d: last line changed", files[0], footer); code != exitFailed || !strings.Contains(out, want) {
		t.Errorf("exit %d, want 1 and a line starting %q:\n%s", code, want, out)
	}
	if strings.Contains(out, "2 of 2 sealed audit files verify") {
		t.Errorf("the summary says every file verifies:\n%s", out)
	}
}

func TestUnknownCommandIsAUsageError(t *testing.T) {
	h := newHarness(t)
	if code, _, errOut := h.run("frobnicate"); code != exitUsage || !strings.Contains(errOut, "usage") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// Files renamed to hide them, deleted files and edited older footers make
// `audit verify` exit 1; `retention status` still answers (exit 0) with a
// damaged newest file and names it.
func TestAuditVerifyReportsHiddenAndDeletedFiles(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createDB()
	var files []string
	for range 3 {
		var res retention.Result
		if err := json.Unmarshal([]byte(h.mustRun("retention", "run", "--json")), &res); err != nil {
			t.Fatal(err)
		}
		files = append(files, res.AuditFile)
		time.Sleep(1100 * time.Millisecond) // file names hold the start to the second
	}
	audits := filepath.Join(h.dbPath, "purge_audit")
	h.mustRun("audit", "verify", audits)
	if err := os.Rename(files[1], files[1]+".inprogress"); err != nil {
		t.Fatal(err)
	}
	code, out, _ := h.run("audit", "verify", audits)
	if code != exitFailed || !strings.Contains(out, "no live run holds the lease") || !strings.Contains(out, "not a sealed file") {
		t.Fatalf("renamed to .inprogress: exit %d\n%s", code, out)
	}
	if err := os.Remove(files[1] + ".inprogress"); err != nil {
		t.Fatal(err)
	}
	code, out, _ = h.run("audit", "verify", audits)
	if code != exitFailed || !strings.Contains(out, filepath.Base(files[2])) || !strings.Contains(out, "matches no sealed file") {
		t.Fatalf("deleted file: exit %d\n%s", code, out)
	}

	data, err := os.ReadFile(files[2])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[2], data[:len(data)-20], 0o640); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := h.run("retention", "status", "--json")
	if code != exitOK || !strings.Contains(out, `"status": "damaged"`) || !strings.Contains(out, filepath.Base(files[2])) {
		t.Fatalf("status with a damaged newest file: exit %d\n%s%s", code, out, errOut)
	}
}

// audit verify --since RUN checks from that run's file on, with its link
// to the file before: exit 0 on a whole trail, 1 when the file before the
// run was changed, 2 for a run the trail does not hold.
func TestAuditVerifySince(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createDB()
	var runs []retention.Result
	for i := range 3 {
		if i > 0 {
			time.Sleep(1100 * time.Millisecond) // file names hold the start to the second
		}
		var res retention.Result
		if err := json.Unmarshal([]byte(h.mustRun("retention", "run", "--json")), &res); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, res)
	}
	audits := filepath.Join(h.dbPath, "purge_audit")
	out := h.mustRun("audit", "verify", audits, "--since", runs[1].RunID)
	if want := "2 of 2 sealed audit files verify in " + audits + " from " + runs[1].AuditFile + " on"; !strings.Contains(out, want) {
		t.Fatalf("want %q in:\n%s", want, out)
	}
	data, err := os.ReadFile(runs[0].AuditFile)
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(data, []byte(`"status":"completed"`), []byte(`"status":"failed"`), 1)
	if err := os.WriteFile(runs[0].AuditFile, edited, 0o640); err != nil {
		t.Fatal(err)
	}
	code, out, _ := h.run("audit", "verify", audits, "--since", runs[1].RunID)
	if want := "FAIL " + runs[1].AuditFile + ":1: prev_file matches no sealed file"; code != exitFailed || !strings.Contains(out, want) {
		t.Fatalf("exit %d, want 1 and %q:\n%s", code, want, out)
	}
	if code, _, errOut := h.run("audit", "verify", audits, "--since", "nosuch"); code != exitUsage || !strings.Contains(errOut, "--since") {
		t.Fatalf("unknown run: exit %d, stderr %q", code, errOut)
	}
}
