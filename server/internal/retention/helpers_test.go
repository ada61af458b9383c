package retention

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/logging"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

const day = 24 * time.Hour

// t0 is where every test's clock starts: a deletion made now is due
// PERIOD later.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// env is one test's world: a real store, audit folder and lease file under
// t.TempDir(), a fake clock shared by the store and the runner, metrics on
// their own registry and captured logs.
type env struct {
	t       *testing.T
	dir     string
	clock   *fakeClock
	st      *store.Store
	cfg     config.Retention
	reg     *prometheus.Registry
	metrics *Metrics
	logs    *syncBuffer
	logger  *slog.Logger
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	clock := newFakeClock(t0)
	st, err := store.Open(filepath.Join(dir, "db"), store.Options{Now: clock.Now})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	auditPath := filepath.Join(dir, "audit")
	e := &env{
		t:     t,
		dir:   dir,
		clock: clock,
		st:    st,
		cfg: config.Retention{
			Enabled:       true,
			Period:        30 * day,
			MessagePeriod: 30 * day,
			Cron:          "0 2 * * *",
			MinPeriod:     time.Hour,
			AuditPath:     auditPath,
			LeasePath:     filepath.Join(auditPath, "retention.lock"),
			LeaseTTL:      5 * time.Minute,
			BatchSize:     1000,
			RunMissed:     true,
		},
		reg:  prometheus.NewRegistry(),
		logs: &syncBuffer{},
	}
	e.metrics = NewMetrics(e.reg)
	// The server's own JSON logger, so that tests read lines as operators do.
	logger, sink, err := logging.New(logging.Options{Level: "debug", Format: "json", Stderr: e.logs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	e.logger = logger
	return e
}

// runner builds a runner over the env's store with the env's config.
func (e *env) runner() *Runner {
	e.t.Helper()
	r, err := NewRunner(RunnerOptions{
		Store:   e.st,
		Config:  e.cfg,
		Logger:  e.logger,
		Metrics: e.metrics,
		Clock:   e.clock,
		Host:    "test-host",
		PID:     4242,
		Version: "test",
	})
	if err != nil {
		e.t.Fatalf("NewRunner: %v", err)
	}
	return r
}

// run runs once and checks the audit file verifies.
func (e *env) run(r *Runner, req RunRequest) (Result, runAudit) {
	e.t.Helper()
	res, err := r.Run(context.Background(), req)
	if err != nil {
		e.t.Fatalf("run: %v (result %+v)", err, res)
	}
	return res, e.audit(res)
}

// runPaced runs once in the background, advancing the fake clock past
// every pause, and returns the result with the pauses the run asked for.
func (e *env) runPaced(r *Runner, step time.Duration) (Result, []time.Duration) {
	e.t.Helper()
	done := make(chan Result, 1)
	go func() {
		res, err := r.Run(context.Background(), RunRequest{Trigger: TriggerCLI})
		if err != nil {
			e.t.Errorf("run: %v", err)
		}
		done <- res
	}()
	var pauses []time.Duration
	for {
		e.clock.mu.Lock()
		pending, changed := len(e.clock.timers), e.clock.changed
		e.clock.mu.Unlock()
		if pending > 0 {
			pauses = append(pauses, e.clock.waitTimers(e.t, 1)...)
			e.clock.Advance(step)
			continue
		}
		select {
		case res := <-done:
			return res, pauses
		case <-changed:
		case <-time.After(10 * time.Second):
			e.t.Fatal("run neither paused nor finished")
		}
	}
}

// beginPurge claims deleted thread tid as run runID would, leaving its
// purge marker as a crash right after the claim does.
func (e *env) beginPurge(tid, runID string) {
	e.t.Helper()
	ctx := context.Background()
	th, err := e.st.GetThread(ctx, tid)
	if err != nil {
		e.t.Fatal(err)
	}
	m := store.PurgeMarker{Kind: store.KindThread, ID: tid, ThreadID: tid, DeletedTS: th.DeletedTS, RunID: runID,
		StartedAt: e.clock.Now().UnixNano()}
	if err := e.st.BeginPurge(ctx, m); err != nil {
		e.t.Fatal(err)
	}
}

// at moves the shared clock to t0+d.
func (e *env) at(d time.Duration) {
	e.clock.mu.Lock()
	e.clock.now = t0.Add(d)
	e.clock.mu.Unlock()
}

// thread creates a live thread with msgs messages of versions versions
// each and returns the message IDs.
func (e *env) thread(tid string, msgs, versions int) []string {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.st.CreateThread(ctx, store.Thread{ID: tid, Title: "secret title " + tid, Author: "secret-author"}); err != nil {
		e.t.Fatalf("create thread %s: %v", tid, err)
	}
	var ids []string
	for i := range msgs {
		m, err := e.st.AppendMessage(ctx, tid, store.Message{
			ID:     fmt.Sprintf("%s-m%d", tid, i),
			Author: "secret-author",
			Body:   json.RawMessage(`{"text":"secret body"}`),
		})
		if err != nil {
			e.t.Fatalf("append message to %s: %v", tid, err)
		}
		for v := 1; v < versions; v++ {
			if _, err := e.st.EditMessage(ctx, tid, m.ID, json.RawMessage(fmt.Sprintf(`{"text":"secret body v%d"}`, v+1))); err != nil {
				e.t.Fatalf("edit message %s: %v", m.ID, err)
			}
		}
		ids = append(ids, m.ID)
	}
	return ids
}

func (e *env) deleteThread(tid string) {
	e.t.Helper()
	if _, err := e.st.DeleteThread(context.Background(), tid); err != nil {
		e.t.Fatalf("delete thread %s: %v", tid, err)
	}
}

func (e *env) deleteMessage(tid, mid string) {
	e.t.Helper()
	if _, err := e.st.DeleteMessage(context.Background(), tid, mid); err != nil {
		e.t.Fatalf("delete message %s: %v", mid, err)
	}
}

// exists reports whether any key of the item is left.
func (e *env) exists(kind store.ItemKind, id string) bool {
	e.t.Helper()
	ok, err := e.st.ItemExists(context.Background(), kind, id)
	if err != nil {
		e.t.Fatalf("ItemExists(%s %s): %v", kind, id, err)
	}
	return ok
}

// keys returns every key and value under the given prefixes (all keys when
// none is given).
func (e *env) keys(prefixes ...string) map[string]string {
	e.t.Helper()
	if len(prefixes) == 0 {
		prefixes = []string{""}
	}
	out := map[string]string{}
	for _, p := range prefixes {
		opts := &pebble.IterOptions{}
		if p != "" {
			opts.LowerBound = []byte(p)
			opts.UpperBound = append([]byte(p[:len(p)-1]), p[len(p)-1]+1)
		}
		it, err := e.st.DB().NewIter(opts)
		if err != nil {
			e.t.Fatalf("iterate: %v", err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			out[string(it.Key())] = string(it.Value())
		}
		if err := it.Close(); err != nil {
			e.t.Fatalf("close iterator: %v", err)
		}
	}
	return out
}

// itemKeys returns the keys of a thread: its own and its messages' versions.
func (e *env) threadKeys(tid string, mids []string) map[string]string {
	prefixes := []string{"thread:" + tid + ":"}
	for _, m := range mids {
		prefixes = append(prefixes, "version:msg:"+m+":")
	}
	return e.keys(prefixes...)
}

// runAudit is a run's audit file, decoded.
type runAudit struct {
	Path   string
	Header audit.Header
	Items  []audit.Item
	Footer audit.Footer
}

// audit reads and verifies the file of res.
func (e *env) audit(res Result) runAudit {
	e.t.Helper()
	if !strings.HasSuffix(res.AuditFile, ".jsonl") {
		e.t.Fatalf("audit file %q is not sealed", res.AuditFile)
	}
	if err := audit.VerifyFile(res.AuditFile); err != nil {
		e.t.Fatalf("audit file does not verify: %v", err)
	}
	return readAudit(e.t, res.AuditFile)
}

func readAudit(t *testing.T, path string) runAudit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ra := runAudit{Path: path}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, audit.MaxLineSize)
	for sc.Scan() {
		var line struct {
			Msg string `json:"msg"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var dst any
		switch line.Msg {
		case audit.MsgHeader:
			dst = &ra.Header
		case audit.MsgFooter:
			dst = &ra.Footer
		case audit.MsgItem:
			ra.Items = append(ra.Items, audit.Item{})
			dst = &ra.Items[len(ra.Items)-1]
		default:
			t.Fatalf("%s: unknown record %q", path, line.Msg)
		}
		if err := json.Unmarshal(sc.Bytes(), dst); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ra
}

// item returns the only record of id, failing when there is not exactly one.
func (ra runAudit) item(t *testing.T, id string) audit.Item {
	t.Helper()
	var found []audit.Item
	for _, it := range ra.Items {
		if it.ItemID == id {
			found = append(found, it)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one audit record for %s, got %d: %+v", id, len(found), ra.Items)
	}
	return found[0]
}

// noItem fails when the file has a record of id.
func (ra runAudit) noItem(t *testing.T, id string) {
	t.Helper()
	for _, it := range ra.Items {
		if it.ItemID == id {
			t.Fatalf("unexpected audit record for %s: %+v", id, it)
		}
	}
}

// auditFiles lists every file under the audit root (lease files excluded).
func (e *env) auditFiles() []string {
	e.t.Helper()
	var files []string
	err := filepath.WalkDir(e.cfg.AuditPath, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.Contains(d.Name(), "retention-") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		e.t.Fatal(err)
	}
	return files
}

// syncBuffer is a bytes.Buffer safe for concurrent log writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
