package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/internal/testtools"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// A sealed restore drill from the original server's shell (its key
// store, backup and export folders set): without --keystore the restore
// is refused naming the key store in use and the way out, not "the
// database folder"; with one it prints the environment that serves the
// copy, which, run by sh in that shell, reaches the copy's database, trail
// and key store and none of the original's folders.
func TestRestoreSealedDrillFromTheLiveShell(t *testing.T) {
	sh := testtools.Need(t, "sh", "a POSIX shell: Debian package dash")
	h, liveKeys := sealedHarness(t, testKEK(7))
	root := filepath.Dir(h.dbPath)
	liveBackups, liveExports := filepath.Join(root, "backups"), filepath.Join(root, "exports")
	for _, d := range []string{liveBackups, liveExports} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	h.environ = append(h.environ, "PROGRESSDB_BACKUP_PATH="+liveBackups, "PROGRESSDB_RETENTION_EXPORT_PATH="+liveExports,
		"PROGRESSDB_RETENTION_LEASE_PATH="+filepath.Join(root, "audit", "retention.lock"))
	bodies := writeSealed(t, h.environ, 2)
	archive := filepath.Join(root, "b.tar.zst")
	h.mustRun("backup", "create", "--out", archive)

	drillAudit, drillDB, drillKeys := filepath.Join(root, "drill-audit"), filepath.Join(root, "drill-db"), filepath.Join(root, "drill-keys")
	if err := os.Mkdir(drillAudit, 0o700); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := h.run("restore", archive, "--db", drillDB, "--audit", drillAudit)
	if code != exitUsage || !strings.Contains(errOut, liveKeys) || !strings.Contains(errOut, "PROGRESSDB_KEYSTORE_PATH") ||
		!strings.Contains(errOut, "--keystore DIR") || strings.Contains(errOut, "database folder") {
		t.Fatalf("restore without --keystore: exit %d, stderr %q; want 2 naming the key store in use, %s and --keystore DIR",
			code, errOut, config.VarKeystorePath)
	}

	out := h.mustRun("restore", archive, "--db", drillDB, "--audit", drillAudit, "--keystore", drillKeys)
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "  export ") || strings.HasPrefix(l, "  unset ") || strings.HasPrefix(l, "  #") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	if len(lines) == 0 {
		t.Fatalf("restore printed no environment to serve the copy:\n%s", out)
	}
	cmd := exec.Command(sh, "-e", "-c", strings.Join(lines, "\n")+"\nenv")
	cmd.Env = h.environ
	envOut, err := cmd.Output()
	if err != nil {
		t.Fatalf("sh: %v\n%s", err, strings.Join(lines, "\n"))
	}
	var served []string
	for _, kv := range strings.Split(strings.TrimSpace(string(envOut)), "\n") {
		if strings.HasPrefix(kv, "PROGRESSDB_") {
			served = append(served, kv)
		}
	}
	for _, want := range []string{"PROGRESSDB_DB_PATH=" + drillDB, "PROGRESSDB_RETENTION_AUDIT_PATH=" + drillAudit,
		"PROGRESSDB_KEYSTORE_PATH=" + drillKeys} {
		if !slices.Contains(served, want) {
			t.Errorf("the printed environment lacks %s: %v", want, served)
		}
	}
	for _, kv := range served {
		for _, live := range []string{h.dbPath, liveKeys, liveBackups, liveExports, filepath.Join(root, "audit")} {
			if strings.HasSuffix(kv, "="+live) || strings.Contains(kv, "="+live+string(filepath.Separator)) {
				t.Errorf("the printed environment keeps the original's %s", kv)
			}
		}
	}
	cfg, err := config.Load(served)
	if err != nil {
		t.Fatalf("the printed environment does not load: %v", err)
	}
	if cfg.Backup.Path != "" || cfg.Retention.ExportPath != "" || filepath.Dir(cfg.Retention.LeasePath) != drillAudit {
		t.Errorf("the copy's backups %q, exports %q, lease %q: want none, none, in %s", cfg.Backup.Path, cfg.Retention.ExportPath, cfg.Retention.LeasePath, drillAudit)
	}
	// The copy reads with its own key store.
	got := readAll(t, served, bodies)
	for mid, want := range bodies {
		if got[mid] != want {
			t.Errorf("the copy served with the printed environment reads %s as %q, want %q", mid, got[mid], want)
		}
	}

	var rep restoreReport
	_ = os.RemoveAll(drillDB)
	_ = os.RemoveAll(drillKeys)
	if err := json.Unmarshal([]byte(h.mustRun("restore", archive, "--db", drillDB, "--audit", drillAudit, "--keystore", drillKeys, "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.ServeEnv[config.VarKeystorePath] != drillKeys || rep.ServeEnv[config.VarBackupPath] != "" {
		t.Errorf("--json serve_env %v", rep.ServeEnv)
	}
}
