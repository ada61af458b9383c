package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Commands run where PROGRESSDB_DB_PATH holds no database (a typo, or an
// empty folder) exit 1 naming the path and create nothing: before, they
// answered from a new, empty database ("last run: none") and left it on
// disk. Only serve and seed create a database.
func TestCommandsCreateNoDatabase(t *testing.T) {
	commands := [][]string{
		{"retention", "status"},
		{"retention", "status", "--json"},
		{"retention", "run", "--dry-run"},
		{"retention", "run", "--dry-run", "--json"},
		{"retention", "run"},
		{"retention", "policy", "get", "t1"},
		{"retention", "policy", "set", "t1", "--period", "40d"},
		{"retention", "policy", "clear", "t1"},
		{"retention", "pause"},
		{"retention", "resume"},
		{"thread", "get", "t1"},
		{"legal-hold", "list"},
		{"legal-hold", "set", "t1"},
		{"legal-hold", "clear", "t1"},
	}
	parent := t.TempDir()
	commands = append(commands, []string{"backup", "create", "--out", filepath.Join(parent, "backup.tar")})
	empty := filepath.Join(parent, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{filepath.Join(parent, "typo-path"), empty} {
		environ := []string{
			"PATH=" + os.Getenv("PATH"),
			"PROGRESSDB_DB_PATH=" + db,
			"PROGRESSDB_RETENTION_ENABLED=true",
			"PROGRESSDB_LOG_LEVEL=warn",
			// No server listens here: commands that would ask one must not.
			"PROGRESSDB_ADDR=127.0.0.1:1",
			"PROGRESSDB_ADMIN_TOKEN=t",
		}
		for _, args := range commands {
			code, out, errOut := runBinary(t, environ, args...)
			if code != exitFailed || !strings.Contains(errOut, "no database at "+db) || !strings.Contains(errOut, "PROGRESSDB_DB_PATH") {
				t.Errorf("%s with %s: exit %d, want 1 naming the path\nstdout: %s\nstderr: %s", strings.Join(args, " "), db, code, out, errOut)
			}
			// retention run --json reports every exit path on stdout.
			if args[1] == "run" && args[len(args)-1] == "--json" && !strings.Contains(out, `"reason": "no_database"`) {
				t.Errorf("%s: stdout %q, want the no_database report", strings.Join(args, " "), out)
			}
		}
	}
	// audit find reads the audit trail, not the database: a trail that is
	// not there is said so, not taken for one without the item.
	code, out, errOut := runBinary(t, []string{"PROGRESSDB_DB_PATH=" + filepath.Join(parent, "typo-path")}, "audit", "find", "t1")
	if code != exitFailed || !strings.Contains(errOut, "no audit trail at "+filepath.Join(parent, "typo-path", "purge_audit")) {
		t.Errorf("audit find on a missing trail: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "empty" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("the commands left %v beside the empty folder", names)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("the commands left %d files in the empty folder", len(entries))
	}
}
