package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// runJSON runs `retention run --json` and decodes what it printed.
func runJSON(t *testing.T, h *harness, extra ...string) (int, runReport, string) {
	t.Helper()
	code, out, errOut := h.run(append([]string{"retention", "run", "--json"}, extra...)...)
	return decodeRunReport(t, code, out, errOut)
}

// decodeRunReport decodes what `retention run --json` printed; its
// exit_code must be the exit status.
func decodeRunReport(t *testing.T, code int, out, errOut string) (int, runReport, string) {
	t.Helper()
	var rep runReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("exit %d: stdout is not JSON (%v):\n%s\nstderr: %s", code, err, out, errOut)
	}
	if rep.ExitCode != code {
		t.Fatalf("exit %d, exit_code %d", code, rep.ExitCode)
	}
	return code, rep, errOut
}

// --json prints JSON on every exit path, with the reason and, on a
// terminal or not, the same one-line message on stderr.
func TestRetentionRunJSONOnEveryExitPath(t *testing.T) {
	t.Run("completed", func(t *testing.T) {
		h := newHarness(t)
		h.seedDue()
		code, rep, errOut := runJSON(t, h)
		if code != exitOK || rep.Reason != "completed" || rep.Result == nil || rep.Purged == 0 || errOut != "" {
			t.Fatalf("exit %d, %+v, stderr %q", code, rep, errOut)
		}
		if strings.Contains(errOut, "\r") {
			t.Fatal("a progress bar was drawn on a stderr that is no terminal")
		}
	})
	t.Run("lease held", func(t *testing.T) {
		h := newHarness(t)
		h.createDB()
		lease, err := retention.AcquireLease(context.Background(), retention.LeaseConfig{
			Path: filepath.Join(h.dbPath, "purge_audit", "retention.lock"), TTL: time.Minute,
			Owner: "elsewhere/1/x", Host: "elsewhere", PID: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release()
		code, rep, errOut := runJSON(t, h)
		if code != exitLeaseHeld || rep.Reason != "lease_held" || rep.Holder == nil || rep.Holder.Owner != "elsewhere/1/x" ||
			rep.Result != nil || !strings.Contains(errOut, "elsewhere/1/x") {
			t.Fatalf("exit %d, %+v, stderr %q", code, rep, errOut)
		}
	})
	t.Run("paused", func(t *testing.T) {
		h := newHarness(t)
		h.createDB()
		h.mustRun("retention", "pause")
		code, rep, errOut := runJSON(t, h)
		if code != exitFailed || rep.Reason != "paused" || rep.Result != nil || !strings.Contains(errOut, "paused") {
			t.Fatalf("exit %d, %+v, stderr %q", code, rep, errOut)
		}
	})
	t.Run("invalid configuration", func(t *testing.T) {
		h := newHarness(t, "PROGRESSDB_RETENTION_PERIOD=5m")
		code, rep, errOut := runJSON(t, h)
		if code != exitUsage || rep.Reason != "invalid_configuration" || !strings.Contains(rep.Error, "PROGRESSDB_RETENTION_PERIOD") ||
			strings.Count(errOut, "\n") != 1 {
			t.Fatalf("exit %d, %+v, stderr %q", code, rep, errOut)
		}
	})
	t.Run("no database", func(t *testing.T) {
		h := newHarness(t)
		code, rep, _ := runJSON(t, h)
		if code != exitFailed || rep.Reason != "no_database" || !strings.Contains(rep.Error, h.dbPath) {
			t.Fatalf("exit %d, %+v", code, rep)
		}
	})
	// database_busy is checked with a real holder process in
	// TestRetentionRunWhileAServerHoldsTheDatabase.
}

// The bar keeps to its own line: a log line clears it, is written, and
// the bar is drawn again below; clear removes it.
func TestProgressBarAroundLogLines(t *testing.T) {
	var buf bytes.Buffer
	b := &progressBar{w: &buf}
	p := retention.Progress{Done: 5, Due: 10, Purged: 4, Rate: 2.5, Left: 2 * time.Second}
	b.update(p)
	if _, err := b.Write([]byte("a log line\n")); err != nil {
		t.Fatal(err)
	}
	b.clear()
	line := renderProgress(p)
	want := line + "\r\033[K" + "a log line\n" + line + "\r\033[K"
	if buf.String() != want {
		t.Fatalf("wrote %q\nwant  %q", buf.String(), want)
	}
	if line != "[###############...............] 5/10  4 purged  2/s  2s left" {
		t.Fatalf("line %q", line)
	}
	byCause := retention.Progress{Done: 4, Due: 8, Purged: 4, Rate: 1,
		DueByCause: map[string]int64{"max_messages": 2, "deleted": 6}, DoneByCause: map[string]int64{"deleted": 4}}
	if got := renderProgress(byCause); got != "[######......] 4/8  del 4/6  cap 0/2  4 purged  1/s" {
		t.Fatalf("by cause: %q", got)
	}
	if got := renderProgress(retention.Progress{Done: 3, Due: -1}); got != "3 looked at  0 purged  0/s" {
		t.Fatalf("unknown due: %q", got)
	}
	// Through the erase step the line says where the erase is, not a rate.
	erasing := retention.Progress{Done: 10, Due: 10, Purged: 10, Rate: 3,
		Erase: &store.EraseProgress{Step: store.EraseCompact, Done: 2, Total: 5}}
	if got := renderProgress(erasing); got != "[##############################] 10/10  10 purged  erasing: compacting 2/5 ranges" {
		t.Fatalf("erasing: %q", got)
	}
	var nilBar *progressBar
	nilBar.clear() // a run without a terminal has no bar
	if newProgressBar(&buf) != nil {
		t.Fatal("a bar over a buffer")
	}
}
