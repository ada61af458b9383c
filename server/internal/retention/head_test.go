package retention

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// footerHash is the hex SHA-256 of a sealed file's last line.
func footerHash(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	sum := sha256.Sum256(lines[len(lines)-1])
	return hex.EncodeToString(sum[:])
}

// The database's head follows the runs that purge it: a real run moves it
// to its own file; a dry run writes nothing; a run over a database behind
// its trail (a purge it lacks) leaves it where it is.
func TestRunsAdvanceTheHead(t *testing.T) {
	e := newEnv(t)
	r := e.runner()
	ctx := context.Background()
	head := func() string {
		h, ok, err := e.st.AuditHead(ctx)
		if err != nil || !ok {
			t.Fatalf("head: %v %v", ok, err)
		}
		return h.RunID
	}
	first, _ := e.run(r, RunRequest{Trigger: TriggerCLI})
	if got := head(); got != first.RunID {
		t.Fatalf("head %q after the first run, want %q", got, first.RunID)
	}
	dry, _ := e.run(r, RunRequest{Trigger: TriggerCLI, DryRun: true})
	if got := head(); got != first.RunID {
		t.Fatalf("head %q after the dry run %s, want it unchanged (%s)", got, dry.RunID, first.RunID)
	}
	// A later run follows the dry run's file; nothing between purged.
	e.at(time.Second)
	second, _ := e.run(r, RunRequest{Trigger: TriggerCLI})
	if got := head(); got != second.RunID {
		t.Fatalf("head %q after the second run, want %q", got, second.RunID)
	}

	// A run that purged something, then the database set back to the
	// first run (as a copy put back by hand would be): the next run does
	// not move the head past the purge it lacks.
	e.thread("gone", 1, 1)
	e.deleteThread("gone")
	e.at(31 * day)
	third, _ := e.run(r, RunRequest{Trigger: TriggerCLI})
	if third.Purged == 0 {
		t.Fatalf("third run purged nothing: %+v", third)
	}
	back := audit.HeadOf(e.cfg.AuditPath, first.AuditFile, first.RunID, footerHash(t, first.AuditFile))
	if err := e.st.SetAuditHead(ctx, store.AuditHead(back)); err != nil {
		t.Fatal(err)
	}
	e.at(31*day + time.Second)
	e.run(r, RunRequest{Trigger: TriggerCLI})
	if got := head(); got != first.RunID {
		t.Fatalf("head %q, want it left at %s: the database lacks run %s's purges", got, first.RunID, third.RunID)
	}
}
