package backup

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

const day = 24 * time.Hour

// world is one test's database, audit trail, runner and creator, on real
// Pebble under t.TempDir().
type world struct {
	t       *testing.T
	dir     string
	dbPath  string
	st      *store.Store
	cfg     config.Retention
	runner  *retention.Runner
	creator *Creator
	key     ed25519.PrivateKey
	now     time.Time
}

func newWorld(t *testing.T, signed bool) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, dir: dir, dbPath: filepath.Join(dir, "db"), now: time.Now().UTC()}
	w.cfg = config.Retention{
		Enabled: true, Period: 30 * day, MessagePeriod: 30 * day, MinPeriod: time.Hour,
		AuditPath: filepath.Join(dir, "audit"), LeaseTTL: time.Minute, BatchSize: 100, Erase: true,
	}
	if signed {
		_, w.key, _ = ed25519.GenerateKey(rand.Reader)
	}
	w.open()
	return w
}

// open opens the store and builds the runner and creator over it.
func (w *world) open() {
	w.t.Helper()
	st, err := store.Open(w.dbPath, store.Options{Now: func() time.Time { return w.now }})
	if err != nil {
		w.t.Fatalf("open store: %v", err)
	}
	w.st = st
	w.t.Cleanup(func() { _ = st.Close() })
	w.runner, err = retention.NewRunner(retention.RunnerOptions{Store: st, Config: w.cfg,
		Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return w.now }, Version: "test", SigningKey: w.key})
	if err != nil {
		w.t.Fatal(err)
	}
	w.creator, err = NewCreator(Options{Store: st, Hold: w.runner, SigningKey: w.key, Version: "test",
		Path: filepath.Join(w.dir, "backups")})
	if err != nil {
		w.t.Fatal(err)
	}
}

// thread creates a thread with n messages whose bodies name their content,
// so the storetest scanner can look for them.
func (w *world) thread(tid string, n int) {
	w.t.Helper()
	ctx := context.Background()
	if _, err := w.st.CreateThread(ctx, store.Thread{ID: tid, Title: "title-" + tid, Author: "a"}); err != nil {
		w.t.Fatal(err)
	}
	for i := range n {
		body, _ := json.Marshal("secret-" + tid + "-" + fmt.Sprint(i))
		if _, err := w.st.AppendMessage(ctx, tid, store.Message{ID: fmt.Sprintf("%s-m%d", tid, i), Author: "a", Body: body}); err != nil {
			w.t.Fatal(err)
		}
	}
}

// run runs retention once and fails the test unless it completed.
func (w *world) run() retention.Result {
	w.t.Helper()
	res, err := w.runner.Run(context.Background(), retention.RunRequest{Trigger: "cli"})
	if err != nil || res.Status != "completed" {
		w.t.Fatalf("run: %v %+v", err, res)
	}
	return res
}
