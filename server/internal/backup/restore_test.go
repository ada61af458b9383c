package backup

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// testReplayer is a runner as a Replayer: nothing to close.
type testReplayer struct{ *retention.Runner }

func (testReplayer) Close() {}

func (w *world) restoreOptions(file, db string) RestoreOptions {
	return RestoreOptions{File: file, DB: db, Retention: w.cfg, Logger: slog.New(slog.DiscardHandler),
		NewReplayer: func(st *store.Store, rc config.Retention) (Replayer, error) {
			r, err := retention.NewRunner(retention.RunnerOptions{Store: st, Config: rc, Logger: slog.New(slog.DiscardHandler),
				Now: func() time.Time { return w.now }, Version: "test", SigningKey: w.key})
			return testReplayer{r}, err
		}}
}

// TestRestoreWorkflow: a restore makes a new database that knows its
// origin and serves once replayed; a move's restore keeps the backup's
// identity; a folder that is not empty is refused (ErrRefused) untouched.
func TestRestoreWorkflow(t *testing.T) {
	backupOf := func(t *testing.T) (*world, string, string) {
		w := newWorld(t, false)
		w.thread("t1", 3)
		w.run() // the trail exists, as a restore needs
		_, file, err := w.creator.CreateInPath(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		id, err := w.st.DatabaseID(context.Background(), false)
		if err != nil {
			t.Fatal(err)
		}
		return w, file, id
	}
	t.Run("copy", func(t *testing.T) {
		w, file, id := backupOf(t)
		db := filepath.Join(w.dir, "restored")
		res, err := Restore(context.Background(), w.restoreOptions(file, db))
		if err != nil {
			t.Fatalf("Restore: %v", err)
		}
		if res.DatabaseID == "" || res.DatabaseID == id || res.OriginID != id || res.Replay == nil || res.Backup == nil {
			t.Fatalf("Restore = %+v: want a new database_id whose origin is %s, with the backup and its replay", res, id)
		}
		if _, found, err := store.ReadRestoreState(db); err != nil || found {
			t.Fatalf("restore marker after a completed restore: found %v, %v", found, err)
		}
		_, err = Restore(context.Background(), w.restoreOptions(file, db))
		if !errors.Is(err, ErrRefused) {
			t.Fatalf("Restore into a folder that is not empty: %v, want ErrRefused", err)
		}
	})
	t.Run("move", func(t *testing.T) {
		w, file, id := backupOf(t)
		moved := filepath.Join(w.dir, "moved")
		o := w.restoreOptions(file, moved)
		o.KeepIdentity = true
		var opened *store.Store
		o.Open = func() (*store.Store, error) {
			st, err := store.Open(moved, store.Options{})
			opened = st
			return st, err
		}
		res, err := Restore(context.Background(), o)
		if err != nil {
			t.Fatalf("Restore for a move: %v", err)
		}
		defer opened.Close()
		if got, err := opened.DatabaseID(context.Background(), false); err != nil || got != id || res.DatabaseID != "" {
			t.Fatalf("a move's copy has database_id %q (%v), result %q: want the backup's %s kept", got, err, res.DatabaseID, id)
		}
	})
}
