package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store"
)

func TestRetentionPolicyOnTheDatabase(t *testing.T) {
	h := newHarness(t, "PROGRESSDB_RETENTION_MAX_AGE=90d")
	h.mustRun("seed", "--threads", "2", "--messages", "1", "--deleted", "0")
	tid := firstThread(t, h)

	var p retention.ThreadPolicy
	if err := json.Unmarshal([]byte(h.mustRun("retention", "policy", "set", tid, "--max-age", "7d", "--max-messages", "100", "--json")), &p); err != nil {
		t.Fatal(err)
	}
	if p.Effective.MaxAge != "7d" || p.Effective.MaxMessages != 100 || p.Effective.Period != "30d" {
		t.Fatalf("set: %+v", p)
	}
	out := h.mustRun("retention", "policy", "get", "--json", tid)
	if err := json.Unmarshal([]byte(out), &p); err != nil || p.Effective.MaxAge != "7d" || *p.Override.MaxMessages != 100 {
		t.Fatalf("get: %s %v", out, err)
	}
	if out := h.mustRun("retention", "policy", "get", tid); !strings.Contains(out, "max age:         7d (override)") ||
		!strings.Contains(out, "period:          30d (inherited)") {
		t.Fatalf("get (text):\n%s", out)
	}
	if out := h.mustRun("retention", "policy", "clear", tid); !strings.Contains(out, "max age:         90d (inherited)") {
		t.Fatalf("clear:\n%s", out)
	}

	code, _, errOut := h.run("retention", "policy", "set", tid, "--max-age", "10m")
	if code != exitFailed || !strings.Contains(errOut, "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD=true") {
		t.Fatalf("short max age: exit %d, stderr %q", code, errOut)
	}
	// Beyond 2^53−1 no JSON client reads the number exactly (spec §2).
	code, _, errOut = h.run("retention", "policy", "set", tid, "--max-messages", "9007199254740993")
	if code != exitFailed || !strings.Contains(errOut, "at most 9007199254740991 (2^53−1)") {
		t.Fatalf("max messages beyond 2^53-1: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = h.run("retention", "policy", "get", "no-such-thread")
	if code != exitFailed || !strings.Contains(errOut, "not found") {
		t.Fatalf("unknown thread: exit %d, stderr %q", code, errOut)
	}
	for _, args := range [][]string{
		{"retention", "policy"},
		{"retention", "policy", "show", tid},
		{"retention", "policy", "get"},
		{"retention", "policy", "set", tid},
		{"retention", "policy", "set", tid, "--max-messages", "many"},
		{"retention", "policy", "get", tid, "extra"},
		{"retention", "policy", "get", "bad:id"},
	} {
		if code, _, _ := h.run(args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

// firstThread returns the ID of a thread of the harness's database.
func firstThread(t *testing.T, h *harness) string {
	t.Helper()
	st, err := store.Open(h.dbPath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	threads, _, err := st.ListThreads(t.Context(), store.ListOptions{Limit: 1})
	if err != nil || len(threads) == 0 {
		t.Fatalf("list threads: %v", err)
	}
	return threads[0].ID
}
