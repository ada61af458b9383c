package faults

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFaultHangUpRereadsTheTokenFiles rotates the admin token and the API
// key the way an operator does with PROGRESSDB_ADMIN_TOKEN_FILE and
// PROGRESSDB_API_KEY_FILE: it rewrites the files and sends SIGHUP. From
// then on the old ones answer 401 and the new ones are served; a file
// that cannot serve (emptied by mistake) keeps the tokens in force rather
// than locking every client out.
func TestFaultHangUpRereadsTheTokenFiles(t *testing.T) {
	dir := t.TempDir()
	tokenFile, keyFile := filepath.Join(dir, "admin-token"), filepath.Join(dir, "api-key")
	write := func(path, content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(tokenFile, "old-admin-token\n")
	write(keyFile, "old-api-key\n")
	srv := startServer(t, envVars{
		"PROGRESSDB_DB_PATH":          filepath.Join(dir, "db"),
		"PROGRESSDB_ADMIN_TOKEN_FILE": tokenFile,
		"PROGRESSDB_API_KEY_FILE":     keyFile,
		"PROGRESSDB_LOG_FORMAT":       "json",
	})
	srv.mustCall(t, "GET", "/admin/retention", nil, "old-admin-token", http.StatusOK, nil)
	srv.mustCall(t, "GET", "/v1/threads", nil, "old-api-key", http.StatusOK, nil)

	write(tokenFile, "new-admin-token\n")
	write(keyFile, "new-api-key\n")
	hangUp(t, srv)
	waitFor(t, time.Minute, "the new admin token to be served", func() bool {
		status, _ := srv.call(t, "GET", "/admin/retention", nil, "new-admin-token")
		return status == http.StatusOK
	})
	srv.mustCall(t, "GET", "/admin/retention", nil, "old-admin-token", http.StatusUnauthorized, nil)
	srv.mustCall(t, "GET", "/v1/threads", nil, "old-api-key", http.StatusUnauthorized, nil)
	srv.mustCall(t, "GET", "/v1/threads", nil, "new-api-key", http.StatusOK, nil)

	write(tokenFile, "")
	hangUp(t, srv)
	waitFor(t, time.Minute, "the failed reload's log line", func() bool {
		return strings.Contains(srv.stderr.String(), `"msg":"tokens_reload_failed"`)
	})
	srv.mustCall(t, "GET", "/admin/retention", nil, "new-admin-token", http.StatusOK, nil)
	srv.mustCall(t, "GET", "/v1/threads", nil, "new-api-key", http.StatusOK, nil)
	if out := srv.output(); strings.Contains(out, "new-admin-token") || strings.Contains(out, "new-api-key") {
		t.Errorf("the log shows a token:\n%s", out)
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0\n%s", code, srv.output())
	}
}
