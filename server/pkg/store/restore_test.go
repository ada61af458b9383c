package store_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// A restore whose replay has not finished is refused by Open, naming how
// to finish it; only Options.Restoring opens it, and FinishRestore ends
// the refusal.
func TestOpenRefusesRestoreReplaying(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := store.WriteRestoreState(dir, store.RestoreState{State: store.RestoreReplaying, BackupID: "b1"}); err != nil {
		t.Fatal(err)
	}
	_, err = store.Open(dir, store.Options{})
	var ue *store.UnfinishedRestoreError
	if !errors.Is(err, store.ErrRestoreUnfinished) || !errors.As(err, &ue) || ue.State.State != store.RestoreReplaying ||
		!strings.Contains(err.Error(), "progressdb restore --resume --db "+dir) {
		t.Fatalf("open: %v, want an unfinished restore naming restore --resume", err)
	}
	st, err = store.Open(dir, store.Options{Restoring: true})
	if err != nil {
		t.Fatalf("open while restoring: %v", err)
	}
	st.Close()
	if err := store.FinishRestore(dir); err != nil {
		t.Fatal(err)
	}
	st, err = store.Open(dir, store.Options{})
	if err != nil {
		t.Fatalf("open a finished restore: %v", err)
	}
	st.Close()
}

// BecomeCopy gives a restored database a new identity whose lineage names
// the one it had, and the origin's own ancestors; repeating it (a resumed
// restore) changes nothing.
func TestBecomeCopy(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	origin, err := st.DatabaseID(ctx, false)
	if err != nil || origin == "" {
		t.Fatalf("a new database's id %q %v", origin, err)
	}
	if _, ok, _ := st.Lineage(ctx); ok {
		t.Fatal("a new database has a lineage")
	}
	l, err := st.BecomeCopy(ctx, "copy1", "b1")
	if err != nil || l.OriginID != origin || l.BackupID != "b1" || !slices.Equal(l.Ancestors, []string{origin}) {
		t.Fatalf("BecomeCopy: %+v %v", l, err)
	}
	if again, err := st.BecomeCopy(ctx, "copy1", "b1"); err != nil || again.OriginID != origin {
		t.Fatalf("BecomeCopy again: %+v %v", again, err)
	}
	if id, _ := st.DatabaseID(ctx, false); id != "copy1" {
		t.Fatalf("database id %q, want copy1", id)
	}
	// A copy of the copy descends from both.
	l, err = st.BecomeCopy(ctx, "copy2", "b2")
	if err != nil || l.OriginID != "copy1" || !slices.Equal(l.Ancestors, []string{"copy1", origin}) {
		t.Fatalf("BecomeCopy of a copy: %+v %v", l, err)
	}
}
