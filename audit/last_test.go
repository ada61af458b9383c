package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// startRun opens a run that started at start and returns its writer.
func startRun(t *testing.T, root, runID string, start time.Time) *Writer {
	t.Helper()
	h := testHeader()
	h.StartedAt = start
	w, err := newWriter(root, runID, h, stepClock(start, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestLastRun(t *testing.T) {
	root := t.TempDir()
	if sum, err := LastRun(root); sum != nil || err != nil {
		t.Fatalf("empty root: %v, %v", sum, err)
	}
	if sum, err := LastRun(filepath.Join(root, "missing")); sum != nil || err != nil {
		t.Fatalf("missing root: %v, %v", sum, err)
	}

	march := time.Date(2025, 3, 31, 23, 0, 0, 0, time.UTC)
	for i, id := range []string{"zz-early", "aa-late"} { // names order by time first
		w := startRun(t, root, id, march.Add(time.Duration(i)*time.Minute))
		if _, err := w.Close(Footer{FinishedAt: march.Add(time.Hour), Status: RunCompleted, DurationMS: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := LastRun(root)
	if err != nil {
		t.Fatal(err)
	}
	if sum == nil || sum.RunID != "aa-late" || !sum.Sealed || sum.Footer == nil || sum.Footer.DurationMS != 1 ||
		!sum.Header.StartedAt.Equal(march.Add(time.Minute)) || filepath.Base(sum.Path) != "retention-20250331T230100Z-aa-late.jsonl" {
		t.Fatalf("LastRun = %+v", sum)
	}

	// A newer run in progress in a newer month wins; folders that hold no
	// run, or are no month, are passed over.
	for _, dir := range []string{"2025-05", "2099-99", "zzz"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "2025-05", "notes.txt"), []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	april := startRun(t, root, "r-april", time.Date(2025, 4, 2, 0, 0, 0, 0, time.UTC))
	if err := april.Item(testItems()[0]); err != nil {
		t.Fatal(err)
	}
	if err := april.Sync(); err != nil {
		t.Fatal(err)
	}
	sum, err = LastRun(root)
	if err != nil {
		t.Fatal(err)
	}
	if sum.RunID != "r-april" || sum.Sealed || sum.Footer != nil || sum.Path != april.Path() {
		t.Fatalf("LastRun with a run in progress = %+v", sum)
	}

	// A torn last line in a file in progress is not an error.
	appendBytes(t, april.Path(), []byte(`{"msg":"retention_au`))
	if sum, err = LastRun(root); err != nil || sum.RunID != "r-april" || sum.Footer != nil {
		t.Fatalf("LastRun with a torn line = %+v, %v", sum, err)
	}
}

func TestLastRunReportsABrokenNewestFile(t *testing.T) {
	root := t.TempDir()
	path := writeRun(t, root, "r")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	// Sealed, but the footer is gone.
	if err := os.WriteFile(path, bytes.Join(lines[:len(lines)-2], nil), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := LastRun(root); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("LastRun without footer = %v, want ErrCorrupt", err)
	}
	// No header.
	if err := os.WriteFile(path, bytes.Join(lines[1:], nil), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := LastRun(root); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("LastRun without header = %v, want ErrCorrupt", err)
	}
}

func TestLastLine(t *testing.T) {
	long := bytes.Repeat([]byte("y"), 100<<10) // longer than the first window
	cases := []struct {
		name string
		data []byte
		want []byte
	}{
		{"empty", nil, nil},
		{"one line", []byte("a\n"), []byte("a")},
		{"two lines", []byte("a\nbc\n"), []byte("bc")},
		{"torn", []byte("a\nbc"), nil},
		{"long last line", append(append([]byte("a\n"), long...), '\n'), long},
		{"long only line", append(bytes.Clone(long), '\n'), long},
		{"empty last line", []byte("a\n\n"), []byte{}},
	}
	for _, c := range cases {
		got, err := lastLine(bytes.NewReader(c.data), int64(len(c.data)))
		if err != nil || !bytes.Equal(got, c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("%s: lastLine = %.20q, %v; want %.20q", c.name, got, err, c.want)
		}
	}
	tooLong := append(append([]byte("a\n"), bytes.Repeat([]byte("y"), MaxLineSize+1)...), '\n')
	if _, err := lastLine(bytes.NewReader(tooLong), int64(len(tooLong))); err == nil {
		t.Error("a last line over MaxLineSize was accepted")
	}
	atLimit := append(append([]byte("a\n"), bytes.Repeat([]byte("y"), MaxLineSize)...), '\n')
	if got, err := lastLine(bytes.NewReader(atLimit), int64(len(atLimit))); err != nil || len(got) != MaxLineSize {
		t.Errorf("a last line of MaxLineSize bytes: %d bytes, %v", len(got), err)
	}
}
