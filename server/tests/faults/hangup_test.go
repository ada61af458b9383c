package faults

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFaultHangUpReopensTheLogFile does what logrotate does to a server
// that logs to a file: it renames the file, then sends SIGHUP
// (`postrotate kill -HUP`). The server lives on, writes to a new file at
// the configured path (the access line of a request made afterwards
// included), and SIGTERM still drains and exits 0. With the stderr sink,
// SIGHUP is harmless.
func TestFaultHangUpReopensTheLogFile(t *testing.T) {
	t.Parallel()
	t.Run("file sink", func(t *testing.T) {
		dir := t.TempDir()
		logPath := filepath.Join(dir, "log", "progressdb.log")
		srv := startServer(t, envVars{
			"PROGRESSDB_DB_PATH":    filepath.Join(dir, "db"),
			"PROGRESSDB_LOG_SINK":   "file:" + logPath,
			"PROGRESSDB_LOG_FORMAT": "json",
			"PROGRESSDB_LOG_LEVEL":  "debug", // the access log line
		})
		rotated := logPath + ".1"
		if err := os.Rename(logPath, rotated); err != nil {
			t.Fatal(err)
		}
		hangUp(t, srv)
		waitFor(t, time.Minute, "a new log file with the reopen line", func() bool {
			return strings.Contains(readLog(t, logPath), `"msg":"sighup_received"`)
		})
		srv.mustCall(t, "POST", "/v1/threads", map[string]string{"title": "after rotation", "author": "ops"}, "", http.StatusCreated, nil)
		waitFor(t, time.Minute, "the request's log line in the new file", func() bool {
			return strings.Contains(readLog(t, logPath), `"msg":"http_request","method":"POST","route":"/v1/threads"`)
		})
		if old := readLog(t, rotated); !strings.Contains(old, `"msg":"server_started"`) || strings.Contains(old, `"method":"POST"`) {
			t.Errorf("the rotated file should hold the lines before the rotation only:\n%s", old)
		}
		if code := srv.stop(t); code != 0 {
			t.Fatalf("exit status %d after SIGTERM, want 0\n%s", code, srv.output())
		}
		if logs := readLog(t, logPath); !strings.Contains(logs, `"msg":"server_stopping"`) {
			t.Errorf("the new file lacks the shutdown's lines:\n%s", logs)
		}
	})
	t.Run("stderr sink", func(t *testing.T) {
		dir := t.TempDir()
		srv := startServer(t, envVars{"PROGRESSDB_DB_PATH": filepath.Join(dir, "db"), "PROGRESSDB_LOG_FORMAT": "json"})
		hangUp(t, srv)
		waitFor(t, time.Minute, "the hang-up's log line", func() bool {
			return strings.Contains(srv.stderr.String(), `"msg":"sighup_received"`)
		})
		srv.mustCall(t, "GET", "/v1/threads", nil, "", http.StatusOK, nil)
		if code := srv.stop(t); code != 0 {
			t.Fatalf("exit status %d after SIGTERM, want 0\n%s", code, srv.output())
		}
	})
}

// hangUp sends SIGHUP; the server must still be running afterwards.
func hangUp(t *testing.T, srv *server) {
	t.Helper()
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// SIGHUP's default action ends a process at once: give a server that
	// does not handle it the moment to die, then check it serves.
	waitFor(t, time.Minute, "the server to answer after SIGHUP", func() bool {
		if srv.exited() {
			t.Fatalf("SIGHUP ended the server (exit status %d)\n%s", srv.code, srv.output())
		}
		resp, err := httpClient.Get(srv.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// readLog reads a log file; a file not created yet reads as empty.
func readLog(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(data)
}
