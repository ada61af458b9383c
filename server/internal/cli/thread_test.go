package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// threadReportJSON is `thread get --json` as a client reads it: timestamps
// are RFC 3339 strings.
type threadReportJSON struct {
	Thread struct {
		ID        string     `json:"id"`
		CreatedTS time.Time  `json:"created_ts"`
		Deleted   bool       `json:"deleted"`
		DeletedTS *time.Time `json:"deleted_ts"`
		LegalHold bool       `json:"legal_hold"`
	} `json:"thread"`
	Retention struct {
		ThreadID  string `json:"thread_id"`
		Effective struct {
			Period      string `json:"period"`
			MaxMessages int    `json:"max_messages"`
		} `json:"effective"`
	} `json:"retention"`
}

type heldJSON struct {
	Threads []struct {
		ID        string `json:"id"`
		Deleted   bool   `json:"deleted"`
		LegalHold bool   `json:"legal_hold"`
	} `json:"threads"`
}

// checkThreadCommands runs thread get and legal-hold set|clear|list on h,
// whose database has thread tid and no hold.
func checkThreadCommands(t *testing.T, h *harness, tid string) {
	t.Helper()
	if out := h.mustRun("legal-hold", "list"); !strings.Contains(out, "no thread is on legal hold") {
		t.Fatalf("list with no hold:\n%s", out)
	}
	h.mustRun("retention", "policy", "set", tid, "--max-messages", "7")
	if out := h.mustRun("legal-hold", "set", tid); !strings.Contains(out, "legal hold:      yes") {
		t.Fatalf("set:\n%s", out)
	}

	var rep threadReportJSON
	out := h.mustRun("thread", "get", tid, "--json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("thread get --json: %v\n%s", err, out)
	}
	if rep.Thread.ID != tid || !rep.Thread.LegalHold || rep.Thread.CreatedTS.IsZero() || rep.Thread.DeletedTS != nil ||
		rep.Retention.ThreadID != tid || rep.Retention.Effective.MaxMessages != 7 || rep.Retention.Effective.Period != "30d" {
		t.Fatalf("thread get --json:\n%s", out)
	}
	text := h.mustRun("thread", "get", tid)
	for _, want := range []string{"thread:          " + tid, "legal hold:      yes", "deleted:         no", "max messages:    7 (override)"} {
		if !strings.Contains(text, want) {
			t.Errorf("thread get lacks %q:\n%s", want, text)
		}
	}

	var held heldJSON
	if err := json.Unmarshal([]byte(h.mustRun("legal-hold", "list", "--json")), &held); err != nil {
		t.Fatal(err)
	}
	if len(held.Threads) != 1 || held.Threads[0].ID != tid || !held.Threads[0].LegalHold {
		t.Fatalf("list: %+v", held)
	}
	if out := h.mustRun("legal-hold", "list"); !strings.Contains(out, tid) {
		t.Fatalf("list:\n%s", out)
	}
	if out := h.mustRun("legal-hold", "clear", tid); !strings.Contains(out, "legal hold:      no") {
		t.Fatalf("clear:\n%s", out)
	}
	if out := h.mustRun("thread", "get", tid); !strings.Contains(out, "legal hold:      no") {
		t.Fatalf("after clear:\n%s", out)
	}

	code, _, errOut := h.run("thread", "get", "no-such-thread")
	if code != exitFailed || !strings.Contains(errOut, "not found") || !strings.Contains(errOut, "progressdb audit find no-such-thread") {
		t.Fatalf("unknown thread: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = h.run("legal-hold", "set", "no-such-thread")
	if code != exitFailed || !strings.Contains(errOut, "not found") {
		t.Fatalf("hold on unknown thread: exit %d, stderr %q", code, errOut)
	}
	for _, args := range [][]string{
		{"thread", "get"},
		{"thread", "get", "a:b"},
		{"thread", "get", tid, "extra"},
		{"legal-hold", "set"},
		{"legal-hold", "list", "extra"},
		{"legal-hold"},
	} {
		if code, _, _ := h.run(args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

func TestThreadAndLegalHoldOnTheDatabase(t *testing.T) {
	h := newHarness(t)
	h.mustRun("seed", "--threads", "3", "--messages", "2", "--deleted", "0")
	checkThreadCommands(t, h, firstThread(t, h))
}

// With a server on the database, the commands go through its admin API;
// a deleted thread (hidden from /v1) is still shown.
func TestThreadAndLegalHoldThroughTheServer(t *testing.T) {
	h := newHarness(t, "PROGRESSDB_ADMIN_TOKEN=adm")
	h.mustRun("seed", "--threads", "3", "--messages", "2", "--deleted", "0")
	tid := firstThread(t, h)
	addr := startServer(t, h.environ)
	h.environ = append(h.environ, "PROGRESSDB_ADDR="+addr)
	checkThreadCommands(t, h, tid)

	// Deleted: shown through the admin API with its deletion time.
	req := "http://" + addr + "/v1/threads/" + tid
	if err := httpDo(t, "DELETE", req); err != nil {
		t.Fatal(err)
	}
	var rep threadReportJSON
	if err := json.Unmarshal([]byte(h.mustRun("thread", "get", tid, "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Thread.Deleted || rep.Thread.DeletedTS == nil || rep.Thread.DeletedTS.Before(rep.Thread.CreatedTS) {
		t.Fatalf("deleted thread: %+v", rep.Thread)
	}
	if out := h.mustRun("thread", "get", tid); !strings.Contains(out, "deleted:         yes, at ") {
		t.Fatalf("deleted thread:\n%s", out)
	}
}

// httpDo sends a request without a body and wants a 2xx answer.
func httpDo(t *testing.T, method, url string) error {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s", method, url, res.Status)
	}
	return nil
}

// The deployed shape: a `progressdb serve` process holds the database (its
// lock is another process's), and the commands, run from the built binary,
// go through its admin API.
func TestLegalHoldThroughAServerProcess(t *testing.T) {
	h := newHarness(t)
	h.mustRun("seed", "--threads", "3", "--messages", "2", "--deleted", "0")
	tid := firstThread(t, h)
	base := []string{
		"PATH=" + os.Getenv("PATH"),
		"PROGRESSDB_DB_PATH=" + h.dbPath,
		"PROGRESSDB_LOG_LEVEL=warn",
		"PROGRESSDB_ADMIN_TOKEN=adm",
	}
	addr := startBinaryServer(t, base)
	cli := append(slices.Clone(base), "PROGRESSDB_ADDR="+addr)
	run := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := runBinary(t, cli, args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d\nstdout: %s\nstderr: %s", args, code, stdout, stderr)
		}
		return stdout
	}
	run("legal-hold", "set", tid)
	var held heldJSON
	if err := json.Unmarshal([]byte(run("legal-hold", "list", "--json")), &held); err != nil {
		t.Fatal(err)
	}
	if len(held.Threads) != 1 || held.Threads[0].ID != tid {
		t.Fatalf("list: %+v", held)
	}
	var rep threadReportJSON
	if err := json.Unmarshal([]byte(run("thread", "get", tid, "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Thread.LegalHold || rep.Retention.ThreadID != tid {
		t.Fatalf("thread get: %+v", rep)
	}
	// The server's own answer shows the hold: the command did not write
	// behind its back.
	res, err := http.Get("http://" + addr + "/v1/threads/" + tid)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var th struct {
		LegalHold bool `json:"legal_hold"`
	}
	if err := json.NewDecoder(res.Body).Decode(&th); err != nil || !th.LegalHold {
		t.Fatalf("server's thread: %+v %v", th, err)
	}
	run("legal-hold", "clear", tid)
	if out := run("legal-hold", "list"); !strings.Contains(out, "no thread is on legal hold") {
		t.Fatalf("list after clear:\n%s", out)
	}
	// Without the token the command says what to set.
	code, _, stderr := runBinary(t, append(slices.Clone(cli), "PROGRESSDB_ADMIN_TOKEN="), "legal-hold", "set", tid)
	if code != exitFailed || !strings.Contains(stderr, "PROGRESSDB_ADMIN_TOKEN") {
		t.Fatalf("no token: exit %d, stderr %q", code, stderr)
	}
}
