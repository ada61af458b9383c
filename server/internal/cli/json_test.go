package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Every --json output is I-JSON like the HTTP API's answers (spec §2): no
// number beyond ±(2^53−1), and every time an RFC 3339 UTC string as audit
// files write it (or null), never Unix nanoseconds. The commands run as a
// process in a time zone other than UTC, so a local time that reaches an
// output shows.
func TestJSONOutputIsIJSON(t *testing.T) {
	h := newHarness(t, "PROGRESSDB_BACKUP_PATH="+filepath.Join(t.TempDir(), "backups"))
	h.seedDue()
	live, deleted := seededThreads(t, h.dbPath)
	environ := append(slices.Clone(h.environ), "TZ=Asia/Kolkata")
	run := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := runBinary(t, environ, args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d\nstdout: %s\nstderr: %s", args, code, stdout, stderr)
		}
		checkIJSONOutput(t, strings.Join(args, " "), stdout)
		return stdout
	}

	h.mustRun("retention", "policy", "set", live, "--max-messages", "7")
	h.mustRun("legal-hold", "set", live)
	var res retention.Result
	out := run("retention", "run", "--json")
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.AuditFile == "" || res.Purged == 0 {
		t.Fatalf("retention run --json: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"retention", "status", "--json"},
		{"retention", "pause", "--reason", "review", "--json"},
		{"retention", "status", "--json"},
		{"retention", "resume", "--json"},
		{"retention", "policy", "get", live, "--json"},
		{"thread", "get", live, "--json"},
		{"legal-hold", "list", "--json"},
		{"audit", "verify", "--json"},
		{"audit", "find", deleted, "--json"},
		{"backup", "create", "--out", filepath.Join(t.TempDir(), "backup.tar"), "--json"},
		{"backup", "create", "--json"},
		{"backup", "list", "--json"},
		{"version", "--json"},
	} {
		run(args...)
	}
}

// seededThreads returns a live and a deleted thread of the database.
func seededThreads(t *testing.T, dbPath string) (live, deleted string) {
	t.Helper()
	st, err := store.Open(dbPath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	threads, _, err := st.ListThreads(context.Background(), store.ListOptions{Limit: 1000, IncludeDeleted: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range threads {
		switch {
		case th.Deleted && deleted == "":
			deleted = th.ID
		case !th.Deleted && live == "":
			live = th.ID
		}
	}
	if live == "" || deleted == "" {
		t.Fatalf("the seed left no live or no deleted thread among %d", len(threads))
	}
	return live, deleted
}

// checkIJSONOutput fails unless out is I-JSON and every key naming a time
// holds an RFC 3339 UTC string or null.
func checkIJSONOutput(t *testing.T, cmd, out string) {
	t.Helper()
	if err := wire.CheckIJSON([]byte(out)); err != nil {
		t.Errorf("%s: %v\n%s", cmd, err, out)
		return
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Errorf("%s: not JSON: %v\n%s", cmd, err, out)
		return
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if isTimeKey(k) {
					switch c := c.(type) {
					case nil:
					case string:
						if _, err := audit.ParseTime(c); err != nil {
							t.Errorf("%s: %s/%s: %v", cmd, path, k, err)
						}
					default:
						t.Errorf("%s: %s/%s is %v, not an RFC 3339 string", cmd, path, k, c)
					}
					continue
				}
				walk(path+"/"+k, c)
			}
		case []any:
			for _, c := range v {
				walk(path+"/*", c)
			}
		}
	}
	walk("", v)
}

// isTimeKey reports whether a JSON key names a time in this project's
// outputs.
func isTimeKey(k string) bool {
	switch k {
	case "ts", "time", "expires", "next_run", "cutoff":
		return true
	}
	return strings.HasSuffix(k, "_ts") || strings.HasSuffix(k, "_at")
}
