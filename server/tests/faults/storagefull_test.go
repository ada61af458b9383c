package faults

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// dbDisk is the size of the tmpfs the database is put on: room for Pebble
// to open, and filled by a handful of large messages.
const dbDisk = 4 << 20

// TestFaultDatabaseDiskFull fills the disk under a running server's
// database with large message POSTs: the database folder is a 4 MiB tmpfs
// in a private mount namespace (RLIMIT_FSIZE where none can be made).
// Pebble's first failed log write is fatal to it; the server must stop
// (fail-stop) with a storage_fatal log line and a non-zero exit, never
// hang the writes that follow nor answer /healthz with ok.
func TestFaultDatabaseDiskFull(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "db")
	if err := os.MkdirAll(db, 0o700); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	env := envVars{
		"PROGRESSDB_DB_PATH":    db,
		"PROGRESSDB_ADDR":       addr,
		"PROGRESSDB_LOG_FORMAT": "json",
	}
	argv, how := []string{"prlimit", "--fsize=" + strconv.Itoa(dbDisk), "--", binary, "serve"}, "RLIMIT_FSIZE on every file"
	script := `mount -t tmpfs -o size=` + strconv.Itoa(dbDisk) + ` tmpfs "$1" || exit 99
exec "$2" serve`
	for _, unshare := range [][]string{{"unshare", "-m"}, {"unshare", "-Urm"}} {
		probe := append(append([]string{}, unshare...), "mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", db)
		if exec.Command(probe[0], probe[1:]...).Run() == nil {
			argv = append(unshare, "bash", "-c", script, "disk-full", db, binary)
			how = "database on a 4 MiB tmpfs, " + strings.Join(unshare, " ")
			break
		}
	}
	t.Logf("disk full by %s", how)
	srv := &server{proc: startCommand(t, env, argv), url: "http://" + addr}
	waitFor(t, time.Minute, "the server to answer /healthz", func() bool {
		if srv.exited() {
			t.Fatalf("server exited with status %d\n%s", srv.code, srv.output())
		}
		resp, err := httpClient.Get(srv.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	srv.mustCall(t, "POST", "/v1/threads", map[string]string{"id": "big", "title": "t", "author": "a"}, "", http.StatusCreated, nil)

	// A write that hangs is the failure this test is about: the client
	// gives up long before the suite would.
	client := &http.Client{Timeout: 20 * time.Second}
	body := `{"author":"a","body":"` + strings.Repeat("x", 900<<10) + `"}`
	statuses := map[int]int{}
	for i := 0; i < 4*dbDisk/len(body) && !srv.exited(); i++ {
		resp, err := client.Post(srv.url+"/v1/threads/big/messages", "application/json", strings.NewReader(body))
		if err != nil {
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() && !srv.exited() {
				t.Fatalf("write %d hung on a full disk (statuses so far %v)\n%s", i, statuses, srv.output())
			}
			continue // the process is going: the connection broke
		}
		resp.Body.Close()
		statuses[resp.StatusCode]++
		if resp.StatusCode != http.StatusCreated {
			// Whatever it answered, the store must not pass as healthy.
			if hr, err := client.Get(srv.url + "/healthz"); err == nil {
				hr.Body.Close()
				if hr.StatusCode == http.StatusOK {
					t.Errorf("/healthz answered 200 after a write answered %d", resp.StatusCode)
				}
			}
		}
	}
	code, ok := srv.waitTimeout(30 * time.Second)
	if !ok {
		_ = srv.cmd.Process.Signal(syscall.SIGKILL)
		t.Fatalf("the server still runs after its disk filled (statuses %v)\n%s", statuses, srv.output())
	}
	t.Logf("exit %d after statuses %v", code, statuses)
	if code == 0 {
		t.Errorf("exit status 0 after a fatal storage error\n%s", srv.output())
	}
	if !strings.Contains(srv.stderr.String(), `"msg":"storage_fatal"`) {
		t.Errorf("no storage_fatal log line\n%s", srv.output())
	}
}
