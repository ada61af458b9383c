package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/testtools"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// holdEnv names the directory a helper process opens and holds.
const holdEnv = "PROGRESSDB_STORE_TEST_HOLD"

// TestHelperHoldDatabase is not a test: run by TestOpenLockedByAnotherProcess
// in a child process, it opens the store, says "ready", and keeps it open
// until its stdin closes.
func TestHelperHoldDatabase(t *testing.T) {
	dir := os.Getenv(holdEnv)
	if dir == "" {
		t.Skip("helper process only")
	}
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		fmt.Println("open failed:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := s.Close(); err != nil {
		fmt.Println("close failed:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func TestOpenLockedByAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	child := testtools.StartChild(t, "TestHelperHoldDatabase", holdEnv+"="+dir)
	if line, _ := child.Line(); line != "ready" {
		t.Fatalf("helper said %q", line)
	}

	_, err := store.Open(dir, store.Options{})
	if !errors.Is(err, store.ErrDatabaseLocked) {
		t.Fatalf("Open of a database held by another process = %v, want ErrDatabaseLocked", err)
	}
	if !strings.Contains(err.Error(), "in use by another process") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("error %q does not say which database is in use", err)
	}

	// Once the other process lets go, the database opens.
	_ = child.CloseStdin()
	if err := child.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	s := openAt(t, dir, newClock())
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestOpenTwiceInOneProcess(t *testing.T) {
	dir := t.TempDir()
	openAt(t, dir, newClock())
	_, err := store.Open(dir, store.Options{})
	wantErr(t, err, store.ErrDatabaseLocked)
}

func TestOpenErrorsThatAreNotLocks(t *testing.T) {
	file := t.TempDir() + "/file"
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := store.Open(file, store.Options{})
	if err == nil || errors.Is(err, store.ErrDatabaseLocked) {
		t.Fatalf("Open(a regular file) = %v", err)
	}
}

func TestDataSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := newClock()
	s, err := store.Open(dir, store.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	createThread(t, s, "t")
	appendMessage(t, s, "t", "m", "x")
	c.Advance(time.Minute)
	deleteMessage(t, s, "t", "m")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}

	s = openAt(t, dir, c)
	versions, err := s.ListVersions(ctx, "t", "m")
	if err != nil || len(versions) != 2 {
		t.Fatalf("after reopen: %d versions, %v", len(versions), err)
	}
	if got := indexEntries(t, s, store.KindMessage); len(got) != 1 || got[0].DeletedTS != c.Now().UnixNano() {
		t.Fatalf("index after reopen = %+v", got)
	}
}

// With MustExist, a path without a database is refused and left as it
// was: no folder, no lock file in an empty folder, nothing beside a file.
func TestOpenMustExistCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	empty := dir + "/empty"
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	file := dir + "/file"
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{dir + "/typo", dir + "/typo/deeper", empty} {
		_, err := store.Open(path, store.Options{MustExist: true})
		if !errors.Is(err, store.ErrNoDatabase) || !strings.Contains(err.Error(), path) {
			t.Errorf("Open(%s, MustExist) = %v, want ErrNoDatabase naming the path", path, err)
		}
	}
	if _, err := store.Open(file, store.Options{MustExist: true}); err == nil {
		t.Errorf("Open(a file, MustExist) succeeded")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("the folder holds %d entries after the refused opens, want 2 (empty, file)", len(entries))
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("the empty folder got %d entries", len(entries))
	}

	db := dir + "/db"
	s, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = store.Open(db, store.Options{MustExist: true})
	if err != nil {
		t.Fatalf("Open(an existing database, MustExist) = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
