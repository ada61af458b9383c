package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// exportSpec is a smaller crash fixture: exporting reads every purged
// item whole, so fewer items fill the same kill window.
func exportSpec() fixtureSpec {
	return pick(
		fixtureSpec{EligibleThreads: 50, LiveThreads: 30, HeldThreads: 3, RecentThreads: 3,
			Messages: 12, Versions: 2, OldDeletedMessages: 2, RecentDeletedMessages: 1},
		fixtureSpec{EligibleThreads: 150, LiveThreads: 100, HeldThreads: 5, RecentThreads: 5,
			Messages: 30, Versions: 2, OldDeletedMessages: 2, RecentDeletedMessages: 1},
	)
}

// exportEnv is pacedEnv with export on.
func exportEnv(s site) envVars {
	return pacedEnv(s).with("PROGRESSDB_RETENTION_EXPORT_PATH", s.exports())
}

func (s site) exports() string { return filepath.Join(s.dir, "exports") }

// TestFaultCrashExport kills `progressdb retention run` with export on at
// random instants (between a group's marker sync and its records, inside a
// record, between the export sync and the deletes, at the seal), reruns
// until a run completes, and checks spec §3.3 on top of every invariant of
// TestFaultCrashAnyInstant: every purged item has a complete record (the
// content it had before any run, every version) in the sealed exports, the
// first of its records; any later record of it is marked recovered; no
// export is left in progress; every audit footer's export verifies.
func TestFaultCrashExport(t *testing.T) {
	t.Parallel()
	spec := exportSpec()
	window := cleanExportRun(t, spec)
	t.Logf("a clean run takes %s; kills land within %s of a start", window, window)
	total := 0
	for i := range pick(1, suite.trials) {
		t.Run(fmt.Sprintf("trial_%d", i), func(t *testing.T) {
			rng := trialRand(t, i)
			s, fx, before := prepareSite(t, t.TempDir(), spec, rng)
			content := contentBefore(t, s, fx)
			crashes := crashRemaining(t, s, fx, before, exportEnv(s), 2+rng.IntN(4), rng, window)
			checkInvariants(t, s, fx, before, crashes.abandoned)
			checkExports(t, s, fx, content)
			total += crashes.kills
		})
	}
	t.Logf("%d kills in all", total)
}

// crashRemaining is crashUntilComplete with kill instants drawn from what
// is left of the work: a run after a kill has less to do, so a kill drawn
// from the whole window would mostly come too late. Up to kills runs are
// killed; the first that finishes before its kill ends the trial.
func crashRemaining(t testing.TB, s site, fx *fixture, before dbState, env envVars, kills int,
	rng *rand.Rand, window time.Duration) *crashLog {
	t.Helper()
	const floor = 60 * time.Millisecond // process start, Pebble recovery, sealing
	crashes := &crashLog{}
	left := window
	for attempt := 0; ; attempt++ {
		if attempt > kills+3 {
			t.Fatalf("no run completed in %d attempts", attempt)
		}
		p := startRetention(t, env)
		if crashes.kills < kills {
			delay := killDelay(rng, left)
			if killAfter(p, delay) {
				crashes.killed(t, s, fx, before, fmt.Sprintf("attempt %d, after %s", attempt, delay))
				left = max(left-delay+floor, floor)
				continue
			}
		}
		if code := p.wait(t, processTimeout); code != 0 {
			t.Fatalf("attempt %d: exit %d\n%s", attempt, code, p.output())
		}
		if res := parseResult(p); res == nil || res.Status != audit.RunCompleted {
			t.Fatalf("attempt %d: no completed run\n%s", attempt, p.output())
		}
		return crashes
	}
}

// cleanExportRun is cleanRunDuration with export on.
func cleanExportRun(t *testing.T, spec fixtureSpec) (d time.Duration) {
	t.Helper()
	t.Run("clean", func(t *testing.T) {
		s, fx, before := prepareSite(t, t.TempDir(), spec, trialRand(t, -1))
		content := contentBefore(t, s, fx)
		began := time.Now()
		p, res := runRetention(t, exportEnv(s))
		d = time.Since(began)
		if p.code != 0 || res == nil || res.Status != audit.RunCompleted {
			t.Fatalf("clean run: exit %d, result %+v\n%s", p.code, res, p.output())
		}
		checkInvariants(t, s, fx, before, nil)
		checkExports(t, s, fx, content)
	})
	if d == 0 {
		t.FailNow()
	}
	return d
}

// contentBefore reads, before any run, what the export record of every
// item that must go has to hold: {thread, messages} as JSON.
func contentBefore(t testing.TB, s site, fx *fixture) map[itemRef]string {
	t.Helper()
	st := openStore(t, s.db)
	defer st.Close()
	ctx := context.Background()
	out := map[itemRef]string{}
	for ref := range fx.due {
		var c recordContent
		var err error
		if ref.kind == store.KindThread {
			err = st.ReadThreadContent(ctx, ref.id, &c)
		} else {
			err = st.ReadMessageContent(ctx, fx.threadOf[ref.id], ref.id, &c)
		}
		if err != nil {
			t.Fatalf("read %s: %v", ref, err)
		}
		out[ref] = c.json()
	}
	return out
}

// recordContent collects an item's content as a store.ContentSink.
type recordContent struct {
	thread   json.RawMessage
	messages []audit.ExportMessage
}

func (c *recordContent) Thread(raw []byte) error {
	c.thread = append(json.RawMessage(nil), raw...)
	if raw == nil {
		c.thread = json.RawMessage("null")
	}
	return nil
}

func (c *recordContent) Message(mid string) error {
	c.messages = append(c.messages, audit.ExportMessage{ID: mid, Versions: []json.RawMessage{}})
	return nil
}

func (c *recordContent) Version(raw []byte) error {
	m := &c.messages[len(c.messages)-1]
	m.Versions = append(m.Versions, append(json.RawMessage(nil), raw...))
	return nil
}

func (c *recordContent) json() string {
	if c.messages == nil {
		c.messages = []audit.ExportMessage{}
	}
	b, _ := json.Marshal(struct {
		Thread   json.RawMessage       `json:"thread"`
		Messages []audit.ExportMessage `json:"messages"`
	}{c.thread, c.messages})
	return string(b)
}

// checkExports checks the export tree after a completed run (see
// TestFaultCrashExport).
func checkExports(t testing.TB, s site, fx *fixture, content map[itemRef]string) {
	t.Helper()
	bad := &findings{t: t}
	defer bad.close()
	records := map[itemRef][]audit.ExportRecord{}
	err := filepath.WalkDir(s.exports(), func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			return nil
		case !strings.HasSuffix(path, ".jsonl.gz"):
			bad.errorf("export file not sealed: %s", path)
			return nil
		}
		if _, err := audit.ScanExport(path); err != nil {
			bad.errorf("export %s: %v", path, err)
			return nil
		}
		r, err := audit.OpenExport(path)
		if err != nil {
			return err
		}
		defer r.Close()
		for {
			rec, err := r.ReadRecord()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			ref := itemRef{store.ItemKind(rec.ItemType), rec.ItemID}
			records[ref] = append(records[ref], rec)
		}
	})
	if err != nil {
		t.Fatalf("read exports: %v", err)
	}
	purged := purgedRecords(readAudit(t, s.audit))
	for ref := range purged {
		recs := records[ref]
		if len(recs) == 0 {
			if ref.kind == store.KindMessage && len(purged[threadRef(fx.threadOf[ref.id])]) > 0 {
				continue // went with its thread, whose record holds it
			}
			bad.errorf("%s was purged but is in no export", ref)
			continue
		}
		// Records in the order they were written.
		slices.SortStableFunc(recs, func(a, b audit.ExportRecord) int { return a.ExportedAt.Compare(b.ExportedAt) })
		first := recs[0]
		got, _ := json.Marshal(struct {
			Thread   json.RawMessage       `json:"thread"`
			Messages []audit.ExportMessage `json:"messages"`
		}{first.Thread, first.Messages})
		if want, ok := content[ref]; !ok || string(got) != want {
			bad.errorf("the first export record of %s is not its whole content:\n got %s\nwant %s", ref, got, want)
		}
		for _, r := range recs[1:] {
			if !r.Recovered {
				bad.errorf("%s exported %d times, a later record not marked recovered", ref, len(recs))
			}
		}
	}
	for ref := range records {
		if !fx.mustGo(ref) {
			bad.errorf("%s, which stays, was exported", ref)
		}
	}
}
