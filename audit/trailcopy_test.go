package audit

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A trail's copy holds the trail as CopyTrail found it: sealed files
// whole, a file in progress at its size then, though lines are appended
// and the file is sealed before the copy is written. ReadTrail unpacks it
// into a trail with the same files, modes and bytes.
func TestTrailCopyIsTheTrailWhenTaken(t *testing.T) {
	root, sealed, w := trailWithRunInProgress(t)
	live := w.Path()
	wantLive, err := os.ReadFile(live)
	if err != nil {
		t.Fatal(err)
	}
	c, err := CopyTrail(root)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Files() != 2 {
		t.Fatalf("the copy holds %d files, want 2", c.Files())
	}
	// The run goes on and ends after the copy was taken.
	for _, it := range testItems() {
		if err := w.Item(it); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(testFooter()); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := c.Write(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "copy")
	if err := ReadTrail(context.Background(), &buf, dir); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]byte{sealed: must(os.ReadFile(sealed)), live: wantLive} {
		rel, _ := filepath.Rel(root, path)
		got, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes (%v), want %d", rel, len(got), err, len(want))
		}
		info, err := os.Stat(filepath.Join(dir, rel))
		if err != nil || info.Mode().Perm() != fileMode {
			t.Fatalf("%s: mode %v (%v)", rel, info.Mode(), err)
		}
	}
	if info, err := os.Stat(dir); err != nil || info.Mode().Perm() != dirMode {
		t.Fatalf("the trail's folder: %v (%v)", info.Mode(), err)
	}
}

// A sealed trail's copy leaves a file in progress out, and unpacks into
// the sealed files alone.
func TestSealedTrailCopyLeavesRunsInProgressOut(t *testing.T) {
	root, sealed, w := trailWithRunInProgress(t)
	defer w.Close(testFooter())
	c, err := CopySealedTrail(root)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var buf bytes.Buffer
	if err := c.Write(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "copy")
	if err := ReadTrail(context.Background(), &buf, dir); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(root, sealed)
	if got, err := os.ReadFile(filepath.Join(dir, rel)); err != nil || !bytes.Equal(got, must(os.ReadFile(sealed))) {
		t.Fatalf("%s: %d bytes (%v)", rel, len(got), err)
	}
	live, _ := filepath.Rel(root, w.Path())
	if _, err := os.Stat(filepath.Join(dir, live)); !errors.Is(err, os.ErrNotExist) || c.Files() != 1 {
		t.Fatalf("the run in progress was copied (%d files): %v", c.Files(), err)
	}
}

// trailWithRunInProgress writes a trail of one sealed run's file and
// starts a second run, whose writer it returns.
func trailWithRunInProgress(t *testing.T) (root, sealed string, w *Writer) {
	t.Helper()
	root = t.TempDir()
	sealed = writeRun(t, root, "first")
	h := testHeader()
	h.StartedAt = fixedStart.Add(time.Hour)
	w, err := newWriter(root, "second", h, stepClock(h.StartedAt, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return root, sealed, w
}

// A stream holding anything but runs' files under month folders is
// refused, whatever its entries' names try.
func TestReadTrailRefusesOtherEntries(t *testing.T) {
	for _, name := range []string{"../2026-03/retention-x-a.jsonl", "2026-03/notes.txt", "retention-x-a.jsonl",
		"2026-03/sub/retention-x-a.jsonl", "/etc/retention-x-a.jsonl"} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: 1, Mode: 0o640})
		_, _ = tw.Write([]byte("x"))
		_ = tw.Close()
		err := ReadTrail(context.Background(), &buf, filepath.Join(t.TempDir(), "copy"))
		if !errors.Is(err, ErrTrailStream) {
			t.Errorf("%q: %v, want ErrTrailStream", name, err)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
