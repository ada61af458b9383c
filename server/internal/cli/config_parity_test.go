package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// config check refuses exactly what serve refuses, with the same exit
// status (2) and a one-line message naming the variable. A folder under
// /proc cannot be created, though /proc looks writable to root: before,
// config check said "configuration ok" where serve exited 2.
func TestConfigCheckRefusesWhatServeRefuses(t *testing.T) {
	if _, err := os.Stat("/proc/self"); err != nil {
		t.Skip("no /proc")
	}
	dir := t.TempDir()
	base := []string{
		"PATH=" + os.Getenv("PATH"),
		"PROGRESSDB_DB_PATH=" + filepath.Join(dir, "data"),
		"PROGRESSDB_ADDR=127.0.0.1:0",
		"PROGRESSDB_LOG_LEVEL=warn",
		"PROGRESSDB_RETENTION_ENABLED=true",
	}
	cases := []struct{ name, value string }{
		{"PROGRESSDB_DB_PATH", "/proc/nope"},
		{"PROGRESSDB_RETENTION_AUDIT_PATH", "/proc/nope/audit"},
		{"PROGRESSDB_RETENTION_LEASE_PATH", "/proc/nope/retention.lock"},
		{"PROGRESSDB_RETENTION_EXPORT_PATH", "/proc/nope/exports"},
		{"PROGRESSDB_LOG_SINK", "file:/proc/nope/progressdb.log"},
	}
	for _, c := range cases {
		environ := append(append([]string(nil), base...), c.name+"="+c.value)
		for _, cmd := range [][]string{{"config", "check"}, {"serve"}} {
			code, out, errOut := runBinary(t, environ, cmd...)
			msg := strings.TrimSuffix(errOut, "\n")
			if code != exitUsage || strings.Contains(msg, "\n") || !strings.Contains(msg, c.name) {
				t.Errorf("%s with %s=%s: exit %d, want 2 with one line naming %s\nstdout: %s\nstderr: %s",
					strings.Join(cmd, " "), c.name, c.value, code, c.name, out, errOut)
			}
		}
	}
	// Nothing was left behind by either: serve refused before creating
	// the database folder it was given.
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %d entries in the folder", len(entries))
	}
}
