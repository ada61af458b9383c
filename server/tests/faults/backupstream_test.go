package faults

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// fillForStream writes n messages of 768 KiB that do not compress into
// thread "filler": a streamed backup of the database is then larger than
// what the sockets between server and client buffer, so a client that
// stops reading stalls the server's writes. The first exchange is
// checked against api/openapi.yaml like every call of the suite; the
// others, the same request with another body, are sent as they are:
// checking a 768 KiB body takes seconds under the race detector, and the
// filler's 48 checks made the longest test of make test.
func fillForStream(t *testing.T, srv *server, n int) {
	t.Helper()
	srv.mustCall(t, "POST", "/v1/threads", map[string]string{"id": "filler", "title": "filler", "author": "a"}, "", http.StatusCreated, nil)
	raw := make([]byte, 384<<10)
	for i := range n {
		_, _ = rand.Read(raw)
		msg := map[string]any{"id": fmt.Sprintf("f%d", i), "author": "a", "body": hex.EncodeToString(raw)}
		if i == 0 {
			srv.mustCall(t, "POST", "/v1/threads/filler/messages", msg, "", http.StatusCreated, nil)
			continue
		}
		body, err := json.Marshal(msg)
		must(t, err)
		resp, err := httpClient.Post(srv.url+"/v1/threads/filler/messages", "application/json", bytes.NewReader(body))
		must(t, err)
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /v1/threads/filler/messages: status %d, want %d: %s", resp.StatusCode, http.StatusCreated, answer)
		}
	}
}

// smallReceiveClient is an HTTP client whose connections receive into a
// 64 KiB socket buffer: set before connecting, it keeps the kernel from
// growing the buffer (up to tcp_rmem's 32 MiB on some hosts), so a
// stream the client stops reading stalls after a few MiB, whatever the
// host's settings.
func smallReceiveClient() *http.Client {
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10)
		})
		return errors.Join(err, serr)
	}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// backupCount reads progressdb_backup_total{result} from /metrics (-1
// when the series is missing).
func backupCount(t *testing.T, srv *server, result string) int {
	t.Helper()
	_, body := srv.call(t, "GET", "/metrics", nil, "")
	prefix := `progressdb_backup_total{result="` + result + `"} `
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			var n int
			if _, err := fmt.Sscan(v, &n); err == nil {
				return n
			}
		}
	}
	return -1
}

// Issue 27, problem 4: a streamed backup whose client stops reading while
// a retention run purges a thread and erases. Before, the backup's staging
// checkpoint stayed under DB_PATH for as long as the stream lasted (the
// server had no write timeout), and the run's footer said erased: true
// while the thread's title and bodies were still in that folder's log.
// Now no file under DB_PATH holds them when the run ends, and the stalled
// stream is cut after PROGRESSDB_BACKUP_STREAM_TIMEOUT (a failed backup:
// it was not delivered).
func TestFaultStalledBackupStreamDuringPurge(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	const period = time.Second
	env := s.shortPeriodEnv(period).with(
		"PROGRESSDB_BACKUP_STREAM_TIMEOUT", "3s",
	)
	srv := startServer(t, env)
	// 12 MiB: three times the most Linux's default send buffer grows to
	// (tcp_wmem), with the client's receive buffer held small below.
	fillForStream(t, srv, 16)
	secrets := []string{"title-of-secret"}
	srv.mustCall(t, "POST", "/v1/threads", map[string]string{"id": "secret", "title": secrets[0], "author": "a"}, "", http.StatusCreated, nil)
	for i := range 30 {
		body := fmt.Sprintf("body-of-secret-%02d", i)
		secrets = append(secrets, body)
		srv.mustCall(t, "POST", "/v1/threads/secret/messages", map[string]any{"id": fmt.Sprintf("s%d", i), "author": "a", "body": body},
			"", http.StatusCreated, nil)
	}
	srv.mustCall(t, "DELETE", "/v1/threads/secret", nil, "", http.StatusNoContent, nil)
	deleted := time.Now()

	// The client takes the start of the archive, then nothing.
	req, err := http.NewRequest("POST", srv.url+"/admin/backups/stream?compress=none", nil)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := smallReceiveClient().Do(req)
	must(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: status %d", resp.StatusCode)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}

	sleepUntil(deleted.Add(period)) // the deletion falls due
	var res struct {
		Purged    int    `json:"purged"`
		Status    string `json:"status"`
		AuditFile string `json:"audit_file"`
	}
	srv.mustCall(t, "POST", "/admin/retention/run", nil, adminToken, http.StatusOK, &res)
	if res.Purged != 1 || res.Status != "completed" {
		t.Fatalf("run: %+v, want the thread purged", res)
	}
	audit, err := os.ReadFile(res.AuditFile)
	must(t, err)
	lines := bytes.Split(bytes.TrimSpace(audit), []byte("\n"))
	if footer := lines[len(lines)-1]; !bytes.Contains(footer, []byte(`"erased":true`)) {
		t.Fatalf("footer %s, want erased: true", footer)
	}
	// The run said erased: nothing under DB_PATH may hold the thread.
	storetest.RequireNone(t, s.db, secrets...)

	// The stalled stream is cut: the server counts and logs a failed
	// backup, and the client, reading again, gets a broken archive.
	waitFor(t, time.Minute, "the stalled backup to be counted", func() bool { return backupCount(t, srv, "failed") == 1 })
	if _, err := io.Copy(io.Discard, resp.Body); err == nil {
		t.Fatal("the stalled stream ended as if complete")
	}
	if !strings.Contains(srv.stderr.String()+srv.stdout.String(), "PROGRESSDB_BACKUP_STREAM_TIMEOUT") {
		t.Errorf("the server's log does not say why the stream was cut\n%s", srv.output())
	}
	if staging, _ := filepath.Glob(filepath.Join(s.db, ".backup-checkpoint-*")); len(staging) > 0 {
		t.Errorf("staging checkpoint left: %v", staging)
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d\n%s", code, srv.output())
	}
}

// Issue 27, problem 8: a backup whose client goes away (`backup create
// --out - | head -c 1000`, Ctrl-C) is counted cancelled, not failed, and
// logged without an ERROR backup_failed: ProgressDBBackupsFailing must not
// fire for it.
func TestFaultBackupCancelledByClient(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	env := s.env().with("PROGRESSDB_ADMIN_TOKEN", adminToken)
	srv := startServer(t, env)
	fillForStream(t, srv, 32)
	cli := env.with("PROGRESSDB_ADDR", strings.TrimPrefix(srv.url, "http://"))

	// stream starts backup create --out - and reads 1000 bytes of it.
	stream := func() (*exec.Cmd, io.ReadCloser) {
		cmd := exec.Command(binary, "backup", "create", "--out", "-", "--zstd=false")
		cmd.Env = cli.list()
		out, err := cmd.StdoutPipe()
		must(t, err)
		must(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		if _, err := io.ReadFull(out, make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
		return cmd, out
	}
	// | head -c 1000: the reader goes, the command dies of SIGPIPE.
	cmd, out := stream()
	must(t, out.Close())
	_ = cmd.Wait()
	waitFor(t, time.Minute, "the first backup to be counted", func() bool {
		return backupCount(t, srv, "cancelled")+backupCount(t, srv, "failed")+backupCount(t, srv, "success") >= 1
	})
	// Ctrl-C: the command stops reading the server and exits.
	cmd, out = stream()
	must(t, cmd.Process.Signal(syscall.SIGINT))
	_, _ = io.Copy(io.Discard, bufio.NewReader(out))
	_ = cmd.Wait()
	waitFor(t, time.Minute, "the second backup to be counted", func() bool {
		return backupCount(t, srv, "cancelled")+backupCount(t, srv, "failed")+backupCount(t, srv, "success") >= 2
	})
	if c, f := backupCount(t, srv, "cancelled"), backupCount(t, srv, "failed"); c != 2 || f != 0 {
		t.Errorf("backups cancelled %d, failed %d; want 2 and 0", c, f)
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d\n%s", code, srv.output())
	}
	if logs := srv.stdout.String() + srv.stderr.String(); strings.Contains(logs, "backup_failed") || !strings.Contains(logs, "backup_cancelled") {
		t.Errorf("want backup_cancelled and no backup_failed in the log\n%s", srv.output())
	}
}
