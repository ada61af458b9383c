package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// writePlain writes threads with markers in every title, author and body,
// without sealing, and returns the markers and each message's body.
func writePlain(t *testing.T, db string, threads, msgs int) (markers []string, bodies map[string]string) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	bodies = map[string]string{}
	for i := range threads {
		tid := fmt.Sprintf("t%02d", i)
		title, creator := "title-marker-"+tid, "author-marker-"+tid
		if _, err := st.CreateThread(ctx, store.Thread{ID: tid, Title: title, Author: creator}); err != nil {
			t.Fatal(err)
		}
		markers = append(markers, title, creator)
		for j := range msgs {
			mid := fmt.Sprintf("%s-m%d", tid, j)
			body := "body-marker-" + mid
			raw, _ := json.Marshal(body)
			if _, err := st.AppendMessage(ctx, tid, store.Message{ID: mid, Author: creator, Body: raw}); err != nil {
				t.Fatal(err)
			}
			edited := body + "-edited"
			raw, _ = json.Marshal(edited)
			if _, err := st.EditMessage(ctx, tid, mid, raw); err != nil {
				t.Fatal(err)
			}
			markers = append(markers, body, edited)
			bodies[mid] = edited
		}
	}
	return markers, bodies
}

// keys encrypt-existing seals a database written before sealing, through
// the built binary: killed with SIGKILL after its first batch, run again
// it resumes and finishes; then no title, author or body (of any version)
// is in any file under DB_PATH or the key store (tables decoded, logs
// read raw), everything reads back through the key store, and a third
// run finds nothing to seal and exits 0.
func TestKeysEncryptExisting(t *testing.T) {
	h, ksPath := sealedHarness(t, testKEK(5), "PROGRESSDB_RETENTION_BATCH_SIZE=4")
	markers, bodies := writePlain(t, h.dbPath, 6, 3)
	if rep, err := storetest.Scan(h.dbPath, markers); err != nil || len(rep.Found()) != len(markers) {
		t.Fatalf("the scan finds %d of %d markers in the plain database (%v): it could not see them go", len(rep.Found()), len(markers), err)
	}

	// A long pause after each batch: the kill lands while the job waits
	// after its first one, with most of the database still plain.
	cmd := exec.Command(binary(t), "keys", "encrypt-existing")
	cmd.Env = withEnv(h.environ, "PROGRESSDB_RETENTION_BATCH_PAUSE", "90s")
	// Each batch has a debug line (the summaries of info are seconds apart).
	cmd.Env = withEnv(withEnv(cmd.Env, "PROGRESSDB_LOG_FORMAT", "json"), "PROGRESSDB_LOG_LEVEL", "debug")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	batched := false
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), `"keys_encrypt_batch"`) {
			batched = true
			break
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if !batched {
		t.Fatalf("the job ended without a batch:\n%s", strings.Join(lines, "\n"))
	}
	if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !st.Signaled() {
		t.Fatalf("the job was not killed: %v", cmd.ProcessState)
	}

	code, out, errOut := runBinary(t, h.environ, "keys", "encrypt-existing", "--json")
	var rep encryptReport
	if err := json.Unmarshal([]byte(out), &rep); code != exitOK || err != nil {
		t.Fatalf("rerun: exit %d (%v)\n%s\n%s", code, err, out, errOut)
	}
	want := int64(6 * (1 + 3*2)) // a record per thread and per version
	if !rep.Resumed || rep.Sealed <= 0 || rep.Sealed >= want || rep.Threads == 0 || !rep.Erased {
		t.Fatalf("rerun: %+v, want a resumed pass sealing what the first left of %d records, then erasing", rep, want)
	}
	for _, dir := range []string{h.dbPath, ksPath} {
		scan, err := storetest.Scan(dir, markers)
		if err != nil {
			t.Fatal(err)
		}
		if found := scan.Found(); len(found) > 0 {
			t.Fatalf("%d markers are still in %s, e.g. %s in %v", len(found), filepath.Base(dir), found[0], scan[found[0]])
		}
	}
	got := readAll(t, h.environ, bodies)
	for mid, body := range bodies {
		if got[mid] != body {
			t.Fatalf("%s reads %q after sealing, want %q", mid, got[mid], body)
		}
	}
	st := openSealed(t, h.environ)
	th, err := st.GetThread(context.Background(), "t03")
	st.Close()
	if err != nil || th.Title != "title-marker-t03" || th.Author != "author-marker-t03" || th.Sealed == "" {
		t.Fatalf("thread t03 after sealing: %+v %v", th, err)
	}

	code, out, _ = runBinary(t, h.environ, "keys", "encrypt-existing")
	if code != exitOK || !strings.Contains(out, "nothing to seal") {
		t.Fatalf("third run: exit %d\n%s", code, out)
	}
}

// Without a KEK there is nothing to seal with: exit 2 naming it, and the
// database untouched.
func TestKeysEncryptExistingUsage(t *testing.T) {
	h := newHarness(t)
	h.createDB()
	code, _, errOut := h.run("keys", "encrypt-existing")
	if code != exitUsage || !strings.Contains(errOut, "PROGRESSDB_KEK") {
		t.Fatalf("without a KEK: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = h.run("keys", "encrypt-existing", "now")
	if code != exitUsage || !strings.Contains(errOut, `unexpected argument "now"`) {
		t.Fatalf("with an argument: exit %d, stderr %q", code, errOut)
	}
}

// plainDatabase seeds a plain database of n threads of one message
// (written before sealing) and returns the environment that seals it.
func plainDatabase(t *testing.T, n int) []string {
	t.Helper()
	h := newHarness(t)
	if code, _, errOut := h.run("seed", "--threads", fmt.Sprint(n), "--messages", "1", "--versions", "1"); code != exitOK {
		t.Fatalf("seed: exit %d\n%s", code, errOut)
	}
	root := filepath.Dir(h.dbPath)
	return append(h.environ, "PROGRESSDB_KEK="+testKEK(5), "PROGRESSDB_KEYSTORE_PATH="+filepath.Join(root, "keys"),
		"PROGRESSDB_RETENTION_AUDIT_PATH="+filepath.Join(root, "audit"))
}

// Off a terminal, `keys encrypt-existing` says where it stands in a few
// summaries (done and total threads, rate), not one line per thread: a
// pass over 300 threads logs a handful of lines. Before, it logged one
// line per batch (2,003 lines for 2,001 threads) and no total; 300
// threads are enough to tell the two apart.
func TestKeysEncryptExistingSummaries(t *testing.T) {
	const threads = 300
	environ := withEnv(plainDatabase(t, threads), "PROGRESSDB_LOG_LEVEL", "info")
	code, out, errOut := runBinary(t, environ, "keys", "encrypt-existing")
	if code != exitOK || !strings.Contains(out, fmt.Sprintf(" records in %d threads", threads)) ||
		!strings.Contains(out, fmt.Sprintf("(%d threads were plain)", threads)) {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if len(lines) > 20 {
		t.Fatalf("%d log lines for %d threads, want a few summaries:\n%s", len(lines), threads, strings.Join(lines[:20], "\n"))
	}
	var started, summary, erased bool
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("not a JSON log line: %q", l)
		}
		switch rec["msg"] {
		case "keys_encrypt_started":
			started = rec["threads"] == float64(threads) && rec["threads_plain"] == float64(threads)
		case "keys_encrypt_progress":
			summary = summary || (rec["done"] == float64(threads) && rec["total"] == float64(threads) &&
				rec["records_sealed"].(float64) >= 2*threads && rec["rate_per_sec"] != nil)
		case "keys_encrypt_erased":
			erased = rec["erase_ms"] != nil
		}
	}
	if !started || !summary || !erased {
		t.Fatalf("started with the total %t, summary of done/total %t, erase with its duration %t:\n%s", started, summary, erased, errOut)
	}
}
