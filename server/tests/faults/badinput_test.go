package faults

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
)

// TestFaultBadConfig runs `config check` and `serve` with an invalid value
// of every configuration variable: each must exit 2 with a one-line message
// on stderr naming the variable (spec §6).
func TestFaultBadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "a-regular-file")
	if err := os.WriteFile(file, []byte("not a folder\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	leaseDir := filepath.Join(dir, "lease-is-a-folder")
	if err := os.Mkdir(leaseDir, 0o750); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "lease-is-a-fifo")
	if err := syscall.Mkfifo(fifo, 0o640); err != nil {
		t.Fatal(err)
	}
	exportLink := filepath.Join(dir, "exports-link")
	if err := os.Symlink(leaseDir, exportLink); err != nil {
		t.Fatal(err)
	}
	valid := envVars{
		"PROGRESSDB_DB_PATH":           filepath.Join(dir, "db"),
		"PROGRESSDB_RETENTION_ENABLED": "true",
		"PROGRESSDB_LOG_FORMAT":        "json",
	}
	cases := []struct {
		name, value string
		alsoNames   string // a second variable the message must name
	}{
		{"PROGRESSDB_DB_PATH", file, ""},
		{"PROGRESSDB_ADDR", "localhost", ""},
		{"PROGRESSDB_ADDR", "127.0.0.1:99999", ""},
		{"PROGRESSDB_ADDR", "127.0.0.1:http", ""},
		{"PROGRESSDB_ADMIN_TOKEN", "s3cret\r", ""}, // a token no Authorization header can carry
		{"PROGRESSDB_API_KEY", "key\nwith a newline", ""},
		{"PROGRESSDB_LOG_LEVEL", "verbose", ""},
		{"PROGRESSDB_LOG_FORMAT", "xml", ""},
		{"PROGRESSDB_LOG_SINK", "syslog", ""},
		{"PROGRESSDB_LOG_SINK", "file:", ""},
		{"PROGRESSDB_LOG_SINK", "file:" + file + "/progressdb.log", ""},
		{"PROGRESSDB_RETENTION_ENABLED", "yes", ""},
		{"PROGRESSDB_RETENTION_PERIOD", "30x", ""},
		{"PROGRESSDB_RETENTION_PERIOD", "-1d", ""},
		{"PROGRESSDB_RETENTION_PERIOD", "0", ""},
		{"PROGRESSDB_RETENTION_PERIOD", "1.5d", ""},
		{"PROGRESSDB_RETENTION_PERIOD", "10m", "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD"},
		{"PROGRESSDB_RETENTION_MESSAGE_PERIOD", "soon", ""},
		{"PROGRESSDB_RETENTION_MESSAGE_PERIOD", "0", ""},
		{"PROGRESSDB_RETENTION_CRON", "61 * * * *", ""},
		{"PROGRESSDB_RETENTION_CRON", "every day", ""},
		{"PROGRESSDB_RETENTION_CRON", "TZ=Europe/Paris 0 2 * * *", ""},
		{"PROGRESSDB_RETENTION_MIN_PERIOD", "1 hour", ""},
		{"PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD", "perhaps", ""},
		{"PROGRESSDB_RETENTION_DRY_RUN", "2", ""},
		{"PROGRESSDB_RETENTION_AUDIT_PATH", file, ""},
		{"PROGRESSDB_RETENTION_AUDIT_PATH", filepath.Join(file, "audit"), ""},
		{"PROGRESSDB_RETENTION_LEASE_PATH", filepath.Join(file, "retention.lock"), ""},
		{"PROGRESSDB_RETENTION_LEASE_PATH", leaseDir, ""},
		{"PROGRESSDB_RETENTION_LEASE_PATH", fifo, ""},
		{"PROGRESSDB_RETENTION_LEASE_TTL", "1s", ""},
		{"PROGRESSDB_RETENTION_LEASE_TTL", "abc", ""},
		{"PROGRESSDB_RETENTION_BATCH_SIZE", "0", ""},
		{"PROGRESSDB_RETENTION_BATCH_SIZE", "-5", ""},
		{"PROGRESSDB_RETENTION_BATCH_SIZE", "lots", ""},
		{"PROGRESSDB_RETENTION_BATCH_SIZE", "1000001", ""},
		{"PROGRESSDB_RETENTION_BATCH_PAUSE", "-1s", ""},
		{"PROGRESSDB_RETENTION_BATCH_PAUSE", "2m", ""}, // not below LEASE_TTL/3
		{"PROGRESSDB_RETENTION_MAX_ITEMS", "-1", ""},
		{"PROGRESSDB_RETENTION_MAX_ITEMS", "many", ""},
		{"PROGRESSDB_RETENTION_RUN_MISSED", "sometimes", ""},
		{"PROGRESSDB_RETENTION_YIELD_TO_WRITES", "maybe", ""},
		{"PROGRESSDB_RETENTION_EXPORT_PATH", file, ""},
		{"PROGRESSDB_RETENTION_EXPORT_PATH", filepath.Join(file, "exports"), ""},
		{"PROGRESSDB_RETENTION_EXPORT_PATH", fifo, ""},
		{"PROGRESSDB_RETENTION_EXPORT_PATH", exportLink, ""},
		{"PROGRESSDB_RETENTION_EXPORT_PATH", filepath.Join(dir, "db", "exports"), "PROGRESSDB_DB_PATH"},
	}
	secret := map[string]bool{"PROGRESSDB_ADMIN_TOKEN": true, "PROGRESSDB_API_KEY": true}
	for _, c := range cases {
		for _, cmd := range [][]string{{"config", "check"}, {"serve"}} {
			t.Run(strings.Join(cmd, "_")+"/"+c.name+"="+c.value, func(t *testing.T) {
				env := valid.with("PROGRESSDB_ADDR", freeAddr(t)).with(c.name, c.value)
				p := start(t, env, cmd...)
				code, ok := p.waitTimeout(10 * time.Second)
				msg := strings.TrimSuffix(p.stderr.String(), "\n")
				switch {
				case !ok:
					t.Errorf("%s accepted %s=%q: still running after 10s", p, c.name, c.value)
				case code != 2:
					t.Errorf("%s with %s=%q: exit %d, want 2\n%s", p, c.name, c.value, code, p.output())
				case msg == "" || strings.Contains(msg, "\n"):
					t.Errorf("%s with %s=%q: stderr is not one line:\n%s", p, c.name, c.value, p.output())
				case !strings.Contains(msg, c.name) || !strings.Contains(msg, c.alsoNames):
					t.Errorf("%s with %s=%q: the message does not name %s %s: %s", p, c.name, c.value, c.name, c.alsoNames, msg)
				case secret[c.name] && strings.Contains(p.stdout.String()+p.stderr.String(), strings.TrimSpace(c.value)):
					t.Errorf("%s with %s=%q: the secret is shown: %s", p, c.name, c.value, msg)
				}
			})
		}
	}
}

// TestFaultBadRecords runs retention over records it must not delete by
// mistake: malformed thread and message records (skipped, never deleted,
// the run completes), deletions without deleted_ts (stamped, purged a
// period later, never on sight) and deletion times in the future (skipped).
func TestFaultBadRecords(t *testing.T) {
	t.Parallel()
	spec := fixtureSpec{EligibleThreads: 20, LiveThreads: 10, HeldThreads: 2, Messages: 3, Versions: 2,
		OldDeletedMessages: 1, Malformed: 6, Legacy: 3, Future: 3}
	s, fx, before := prepareSite(t, t.TempDir(), spec, trialRand(t, 0))
	const short = 3 * time.Second
	env := s.env().with(
		"PROGRESSDB_RETENTION_PERIOD", short.String(),
		"PROGRESSDB_RETENTION_MESSAGE_PERIOD", short.String(),
		"PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD", "true",
	)

	completed := func(what string) {
		t.Helper()
		if p, res := runRetention(t, env); p.code != 0 || res == nil || res.Status != audit.RunCompleted {
			t.Fatalf("%s: exit %d\n%s", what, p.code, p.output())
		}
	}
	completed("first run")
	files := readAudit(t, s.audit)
	stamped := itemsWithStatus(files, audit.StatusStamped)
	skipped := itemsWithStatus(files, audit.StatusSkipped)
	for ref := range fx.malformed {
		if !strings.Contains(skipped[ref].Reason, "malformed") {
			t.Errorf("malformed %s: skipped record %+v, want a reason naming the malformed record", ref, skipped[ref])
		}
	}
	for ref := range fx.future {
		if !strings.Contains(skipped[ref].Reason, "future") {
			t.Errorf("%s deleted in the future: skipped record %+v, want a reason naming the future", ref, skipped[ref])
		}
	}
	var due time.Time // when the last stamped item falls due
	for ref := range fx.legacy {
		if _, ok := stamped[ref]; !ok {
			t.Fatalf("legacy %s was not stamped by the first run", ref)
		}
		due = maxTime(due, stamped[ref].Time.Add(short))
	}
	checkKept := func(what string) {
		t.Helper()
		state := snapshotLive(t, s.db)
		for ref := range fx.legacy {
			if !hasKeys(fx, state, ref) {
				t.Errorf("legacy %s was purged %s", ref, what)
			}
		}
	}
	checkKept("by the run that stamped it")

	completed("second run")
	if time.Now().Before(due) {
		checkKept("less than a period after it was stamped")
	}
	sleepUntil(due) // the stamped items fall due one period after they were stamped

	completed("run a period later")
	files = readAudit(t, s.audit)
	purged := purgedRecords(files)
	for ref := range fx.legacy {
		for _, r := range purged[ref] {
			if r.PurgedAt.Before(stamped[ref].Time.Add(short)) {
				t.Errorf("legacy %s purged at %s, less than a period after it was stamped at %s", ref, r.PurgedAt, stamped[ref].Time)
			}
		}
	}
	checkInvariants(t, s, fx, before, nil)
}

// hasKeys reports whether any key of ref is in state.
func hasKeys(fx *fixture, state dbState, ref itemRef) bool {
	for k := range state.keys {
		if owner, _ := fx.owner(k); owner == ref {
			return true
		}
	}
	return false
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// TestFaultBadRequests sends a real server invalid IDs (':', '/', spaces,
// non-ASCII, 129 characters, empty, a leading '.', '-' or '_') in paths and
// bodies, oversized bodies and malformed bodies: 400 (413 when too large)
// with a JSON error, and nothing is created.
func TestFaultBadRequests(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	srv := startServer(t, s.env().with("PROGRESSDB_RETENTION_ENABLED", "false"))
	var th struct {
		ID string `json:"id"`
	}
	srv.mustCall(t, "POST", "/v1/threads", map[string]any{"id": strings.Repeat("a", 128), "title": "t", "author": "a"}, "", http.StatusCreated, &th)
	srv.mustCall(t, "POST", "/v1/threads/"+th.ID+"/messages", map[string]any{"id": "m1", "author": "a", "body": "hi"}, "", http.StatusCreated, nil)

	badIDs := []string{"a:b", "a/b", "a b", "é", "thread-日本", strings.Repeat("a", 129), ".a", "-a", "_a",
		"a\tb", "a%b", "a?b", "a#b", "a\x00b", "thread:x"}
	expect := func(t *testing.T, method, path string, body any, want int) {
		t.Helper()
		status, data := srv.call(t, method, path, body, "")
		if status != want {
			t.Errorf("%s %s: status %d, want %d: %s", method, path, status, want, data)
			return
		}
		if !strings.HasPrefix(strings.TrimSpace(string(data)), `{"error":`) {
			t.Errorf("%s %s: body %s, want a JSON error", method, path, data)
		}
	}
	for _, id := range badIDs {
		t.Run("id="+url.PathEscape(id), func(t *testing.T) {
			p := url.PathEscape(id)
			expect(t, "POST", "/v1/threads", map[string]any{"id": id, "title": "t", "author": "a"}, http.StatusBadRequest)
			expect(t, "GET", "/v1/threads/"+p, nil, http.StatusBadRequest)
			expect(t, "DELETE", "/v1/threads/"+p, nil, http.StatusBadRequest)
			expect(t, "POST", "/v1/threads/"+p+"/restore", nil, http.StatusBadRequest)
			expect(t, "GET", "/v1/threads/"+p+"/messages", nil, http.StatusBadRequest)
			expect(t, "POST", "/v1/threads/"+th.ID+"/messages", map[string]any{"id": id, "author": "a", "body": "x"}, http.StatusBadRequest)
			expect(t, "GET", "/v1/threads/"+th.ID+"/messages/"+p, nil, http.StatusBadRequest)
			expect(t, "PUT", "/v1/threads/"+th.ID+"/messages/"+p, map[string]any{"body": "x"}, http.StatusBadRequest)
			expect(t, "DELETE", "/v1/threads/"+th.ID+"/messages/"+p, nil, http.StatusBadRequest)
			expect(t, "GET", "/v1/threads/"+th.ID+"/messages/"+p+"/versions", nil, http.StatusBadRequest)
		})
	}
	t.Run("id=empty", func(t *testing.T) {
		expect(t, "GET", "/v1/threads/"+th.ID+"/messages//versions", nil, http.StatusBadRequest)
		expect(t, "POST", "/v1/threads//messages", map[string]any{"author": "a", "body": "x"}, http.StatusBadRequest)
	})
	t.Run("bodies", func(t *testing.T) {
		huge := map[string]any{"title": strings.Repeat("x", 2<<20), "author": "a"}
		expect(t, "POST", "/v1/threads", huge, http.StatusRequestEntityTooLarge)
		expect(t, "POST", "/v1/threads/"+th.ID+"/messages", map[string]any{"author": "a", "body": strings.Repeat("x", 2<<20)}, http.StatusRequestEntityTooLarge)
		for _, body := range []string{"{", "[]", `{"title": 5}`, `{"title":"a","author":"b"} {}`, `{"title":"a","nope":1}`, "\xff\xfe", "null x"} {
			expect(t, "POST", "/v1/threads", body, http.StatusBadRequest)
			expect(t, "POST", "/v1/threads/"+th.ID+"/messages", body, http.StatusBadRequest)
			expect(t, "PUT", "/v1/threads/"+th.ID+"/messages/m1", body, http.StatusBadRequest)
		}
	})

	// Nothing but the two valid records was created.
	var list struct {
		Threads []struct {
			ID string `json:"id"`
		} `json:"threads"`
	}
	srv.mustCall(t, "GET", "/v1/threads", nil, "", http.StatusOK, &list)
	if len(list.Threads) != 1 {
		t.Errorf("threads after the bad requests: %+v, want only %s", list.Threads, th.ID)
	}
	if code := srv.stop(t); code != 0 {
		t.Errorf("server exit %d\n%s", code, srv.output())
	}
}
