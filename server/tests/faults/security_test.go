package faults

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
)

// TestFaultAuth checks the credentials of a real server: admin routes
// answer 401 without the admin token or with a wrong one, and 403 when no
// admin token is configured; /v1 needs the API key when one is set.
func TestFaultAuth(t *testing.T) {
	t.Parallel()
	const apiKey = "fault-suite-api-key-93ab"
	admin := []struct{ method, path string }{
		{"GET", "/admin/retention"},
		{"POST", "/admin/retention/run"},
		{"POST", "/admin/retention/run?wait=false"},
		{"PUT", "/admin/threads/t1/legal_hold"},
	}
	wrong := []string{"", "wrong", adminToken + "x", adminToken[:len(adminToken)-1], strings.ToUpper(adminToken), apiKey}

	t.Run("tokens_set", func(t *testing.T) {
		s := newSite(t.TempDir())
		srv := startServer(t, s.env().with("PROGRESSDB_ADMIN_TOKEN", adminToken, "PROGRESSDB_API_KEY", apiKey))
		for _, r := range admin {
			for _, tok := range wrong {
				if status, body := srv.call(t, r.method, r.path, "{}", tok); status != http.StatusUnauthorized {
					t.Errorf("%s %s with token %q: status %d, want 401: %s", r.method, r.path, tok, status, body)
				}
			}
			if status, body := srv.callWithHeader(t, r.method, r.path, "Authorization", "Basic "+adminToken); status != http.StatusUnauthorized {
				t.Errorf("%s %s with a Basic header: status %d, want 401: %s", r.method, r.path, status, body)
			}
		}
		srv.mustCall(t, "GET", "/admin/retention", nil, adminToken, http.StatusOK, nil)

		for _, tok := range []string{"", "wrong", apiKey + "x", adminToken} {
			if status, body := srv.call(t, "GET", "/v1/threads", nil, tok); status != http.StatusUnauthorized {
				t.Errorf("GET /v1/threads with key %q: status %d, want 401: %s", tok, status, body)
			}
			if status, body := srv.call(t, "POST", "/v1/threads", map[string]string{"title": "t", "author": "a"}, tok); status != http.StatusUnauthorized {
				t.Errorf("POST /v1/threads with key %q: status %d, want 401: %s", tok, status, body)
			}
		}
		srv.mustCall(t, "POST", "/v1/threads", map[string]string{"id": "t1", "title": "t", "author": "a"}, apiKey, http.StatusCreated, nil)
		srv.mustCall(t, "GET", "/v1/threads/t1", nil, apiKey, http.StatusOK, nil)
		srv.mustCall(t, "GET", "/healthz", nil, "", http.StatusOK, nil)
	})

	t.Run("no_admin_token", func(t *testing.T) {
		s := newSite(t.TempDir())
		srv := startServer(t, s.env())
		for _, r := range admin {
			for _, tok := range append(wrong, adminToken) {
				if status, body := srv.call(t, r.method, r.path, "{}", tok); status != http.StatusForbidden {
					t.Errorf("%s %s with token %q and no admin token set: status %d, want 403: %s", r.method, r.path, tok, status, body)
				}
			}
		}
		srv.mustCall(t, "GET", "/v1/threads", nil, "", http.StatusOK, nil) // no API key set: open
	})
}

// callWithHeader sends a request without a body and one header.
func (s *server) callWithHeader(t testing.TB, method, path, name, value string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(name, value)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.Bytes()
}

// TestFaultAuditPermissions runs retention with a umask of 000 and checks
// that the audit folders it creates are 0750 and its files 0640 (spec §5),
// the modes set explicitly rather than left to the umask.
func TestFaultAuditPermissions(t *testing.T) {
	t.Parallel()
	s, _, _ := prepareSite(t, t.TempDir(), smallSpec(), trialRand(t, 0))
	for _, args := range [][]string{{"retention", "run"}, {"retention", "run", "--dry-run"}} {
		argv := append([]string{"bash", "-c", `umask 000 && exec "$0" "$@"`, binary}, args...)
		if p := startCommand(t, s.env(), argv); p.wait(t, processTimeout) != 0 {
			t.Fatalf("exit %d\n%s", p.code, p.output())
		}
	}
	files := 0
	err := filepath.WalkDir(s.audit, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o640)
		if d.IsDir() {
			want = fs.ModeDir | 0o750
		} else if strings.HasPrefix(d.Name(), "retention-") {
			files++
		}
		if info.Mode() != want {
			t.Errorf("%s: mode %s, want %s", path, info.Mode(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files != 2 {
		t.Errorf("%d audit files, want 2", files)
	}
}

// TestFaultLeaseSymlink plants a symbolic link at the lease path, to an
// existing file and to a missing one: the run must refuse it (exit
// non-zero, nothing deleted) and leave the link and its target untouched.
func TestFaultLeaseSymlink(t *testing.T) {
	t.Parallel()
	for _, existing := range []bool{true, false} {
		t.Run(fmt.Sprintf("target_exists=%t", existing), func(t *testing.T) {
			s, _, before := prepareSite(t, t.TempDir(), smallSpec(), trialRand(t, 0))
			target := filepath.Join(s.dir, "precious")
			content := []byte("not a lease: must stay as it is\n")
			if existing {
				if err := os.WriteFile(target, content, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.MkdirAll(filepath.Dir(s.lease), 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, s.lease); err != nil {
				t.Fatal(err)
			}

			p, _ := runRetention(t, s.env())
			if p.code == 0 || p.code == exitLeaseHeld {
				t.Errorf("a run with a symbolic link at the lease path exited %d, want a failure\n%s", p.code, p.output())
			}
			if !strings.Contains(p.stderr.String(), "symbolic link") {
				t.Errorf("the error does not say the lease path is a symbolic link:\n%s", p.output())
			}
			if dest, err := os.Readlink(s.lease); err != nil || dest != target {
				t.Errorf("the link at the lease path changed: %q, %v", dest, err)
			}
			got, err := os.ReadFile(target)
			switch {
			case existing && (err != nil || !bytes.Equal(got, content)):
				t.Errorf("the link's target changed: %q, %v", got, err)
			case existing:
				if info, err := os.Stat(target); err != nil || info.Mode() != 0o600 {
					t.Errorf("the link's target mode changed: %v, %v", info.Mode(), err)
				}
			case !os.IsNotExist(err):
				t.Errorf("the link's missing target was created: %q, %v", got, err)
			}
			if after := snapshotLive(t, s.db); !sameKeys(before, after) || len(after.pending) > 0 {
				t.Errorf("a run refused the lease but changed the database")
			}
		})
	}
}

// TestFaultNoContentInLogs plants unique strings in thread titles, message
// bodies and authors, creates, edits, deletes and purges them through a
// real server and the command line with JSON logs at info (plus a dry run,
// status and verification), then searches everything written outside the
// database (log file, audit files, lease files, every process's output)
// for them (spec §5: audit files hold IDs and timestamps only).
func TestFaultNoContentInLogs(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	logFile := filepath.Join(s.dir, "logs", "progressdb.log")
	stamp := fmt.Sprintf("%x", time.Now().UnixNano())
	canaries := map[string]string{
		"title":          "TITLE-CANARY-" + stamp,
		"thread author":  "THREAD-AUTHOR-CANARY-" + stamp,
		"body":           "BODY-CANARY-" + stamp,
		"message author": "MESSAGE-AUTHOR-CANARY-" + stamp,
		"edited body":    "EDIT-CANARY-" + stamp,
	}
	const period = time.Second
	env := s.shortPeriodEnv(period).with(
		"PROGRESSDB_LOG_SINK", "file:"+logFile,
	)
	var procs []*proc
	srv := startServer(t, env)
	procs = append(procs, srv.proc)

	// plant creates a thread with a message and an edit, all carrying the
	// canaries, and soft-deletes the thread or just the message.
	plant := func(i int, deleteThread bool) {
		tid, mid := fmt.Sprintf("t%d", i), fmt.Sprintf("m%d", i)
		srv.mustCall(t, "POST", "/v1/threads", map[string]string{"id": tid, "title": canaries["title"], "author": canaries["thread author"]}, "", http.StatusCreated, nil)
		srv.mustCall(t, "POST", "/v1/threads/"+tid+"/messages", map[string]any{"id": mid, "author": canaries["message author"],
			"body": map[string]string{"text": canaries["body"]}}, "", http.StatusCreated, nil)
		srv.mustCall(t, "PUT", "/v1/threads/"+tid+"/messages/"+mid, map[string]any{"body": canaries["edited body"]}, "", http.StatusOK, nil)
		// Refused requests that carry the canaries are logged too.
		srv.call(t, "POST", "/v1/threads", map[string]any{"title": canaries["title"], "author": canaries["thread author"], "extra": canaries["body"]}, "")
		srv.call(t, "POST", "/v1/threads/"+tid+"/messages", `{"author":"`+canaries["message author"]+`","body":`, "")
		if deleteThread {
			srv.mustCall(t, "DELETE", "/v1/threads/"+tid, nil, "", http.StatusNoContent, nil)
		} else {
			srv.mustCall(t, "DELETE", "/v1/threads/"+tid+"/messages/"+mid, nil, "", http.StatusNoContent, nil)
		}
	}
	for i := range 4 {
		plant(i, i%2 == 0)
	}
	sleepUntil(time.Now().Add(period)) // the deletions fall due
	srv.mustCall(t, "POST", "/admin/retention/run", map[string]bool{"dry_run": true}, adminToken, http.StatusOK, nil)
	var summary struct {
		Purged int64 `json:"purged"`
	}
	srv.mustCall(t, "POST", "/admin/retention/run", nil, adminToken, http.StatusOK, &summary)
	if summary.Purged != 4 {
		t.Errorf("the server's run purged %d items, want 4", summary.Purged)
	}
	for i := 4; i < 8; i++ {
		plant(i, i%2 == 0)
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d\n%s", code, srv.output())
	}
	sleepUntil(time.Now().Add(period))
	run, res := runRetention(t, env)
	if run.code != 0 || res == nil || res.Purged != 4 {
		t.Errorf("the command line run: exit %d, result %+v, want 4 purged\n%s", run.code, res, run.output())
	}
	procs = append(procs, run,
		runCLI(t, env, "retention", "status", "--json"),
		runCLI(t, env, "audit", "verify", s.audit, "--json"),
		runCLI(t, env.with("PROGRESSDB_LOG_SINK", ""), "retention", "run", "--dry-run"), // logs to stderr
	)

	// Search everything written outside the database.
	written := map[string][]byte{}
	err := filepath.WalkDir(s.dir, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case path == s.db:
			return filepath.SkipDir
		case d.Type().IsRegular():
			data, err := os.ReadFile(path)
			written[path] = data
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		written["stdout of "+p.String()] = []byte(p.stdout.String())
		written["stderr of "+p.String()] = []byte(p.stderr.String())
	}
	if len(written[logFile]) == 0 {
		t.Errorf("the log file %s is empty", logFile)
	}
	if rep, _ := audit.VerifyDir(s.audit); rep.Files < 4 {
		t.Errorf("%d audit files, want at least 4", rep.Files)
	}
	for what, canary := range canaries {
		for path, data := range written {
			if bytes.Contains(data, []byte(canary)) {
				t.Errorf("a %s (%s) leaked into %s", what, canary, path)
			}
		}
	}
}
