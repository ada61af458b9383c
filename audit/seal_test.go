package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// sealNow is when the tests' later run seals abandoned files.
var sealNow = fixedStart.Add(90 * time.Minute)

// abandonRun writes a header and the first n test items, syncs them, and
// drops the writer as a crash would. It returns the .inprogress path.
func abandonRun(t *testing.T, root, runID string, n int) string {
	t.Helper()
	w, err := newWriter(root, runID, testHeader(), stepClock(fixedStart, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range testItems()[:n] {
		if err := w.Item(it); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.f.Close(); err != nil {
		t.Fatal(err)
	}
	return w.Path()
}

func appendBytes(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
}

// readFooter returns the last record of a sealed file, which must verify.
func readFooter(t *testing.T, path string) Record {
	t.Helper()
	if err := VerifyFile(path); err != nil {
		t.Fatalf("sealed file does not verify: %v", err)
	}
	lines := fileLines(t, path)
	rec, reason := parseLine(lines[len(lines)-1])
	if reason != "" || rec.Footer == nil {
		t.Fatalf("last line is not a footer: %s", reason)
	}
	return rec
}

func TestSealTornLastLine(t *testing.T) {
	cases := []struct {
		name string
		torn func(good [][]byte) []byte
	}{
		{"no newline", func(good [][]byte) []byte { return good[2][:57] }},
		{"not json", func([][]byte) []byte { return []byte("\x00\x00\x00garbage\n") }},
		{"chain broken", func(good [][]byte) []byte { return append(bytes.Clone(good[2]), '\n') }},
		{"too long", func([][]byte) []byte { return bytes.Repeat([]byte("z"), MaxLineSize+10) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			path := abandonRun(t, root, "run-1", 5)
			good, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			appendBytes(t, path, c.torn(fileLines(t, path)))

			sealed, err := SealAbandoned(root, sealNow)
			if err != nil {
				t.Fatal(err)
			}
			final := strings.TrimSuffix(path, suffixInProgress)
			if !slices.Equal(sealed, []string{final}) {
				t.Fatalf("sealed = %v, want %s", sealed, final)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf(".inprogress file still there: %v", err)
			}
			data, err := os.ReadFile(final)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(data, good) || bytes.Count(data, []byte("\n")) != 7 {
				t.Fatalf("sealed file is not the good lines plus a footer:\n%s", data)
			}

			rec := readFooter(t, final)
			want := Footer{
				FinishedAt: sealNow, Status: RunAborted, Reason: "run did not finish (process ended)",
				Scanned: 5, Eligible: 3, Purged: 2, Failed: 1, Skipped: 1, Stamped: 1, KeysDeleted: 19,
				DurationMS: (90 * time.Minute).Milliseconds(),
			}
			if *rec.Footer != want {
				t.Errorf("footer = %+v\nwant     %+v", *rec.Footer, want)
			}
			if rec.Seq != 6 || !rec.Time.Equal(sealNow) || rec.RunID != "run-1" {
				t.Errorf("footer envelope: seq %d time %v run %q", rec.Seq, rec.Time, rec.RunID)
			}
			assertMode(t, final, fileMode)
		})
	}
}

func TestSealHeaderOnly(t *testing.T) {
	root := t.TempDir()
	path := abandonRun(t, root, "r", 0)
	sealed, err := SealAbandoned(root, sealNow)
	if err != nil || len(sealed) != 1 {
		t.Fatalf("SealAbandoned = %v, %v", sealed, err)
	}
	if got := len(fileLines(t, sealed[0])); got != 2 {
		t.Fatalf("%d lines, want header and footer", got)
	}
	f := readFooter(t, sealed[0]).Footer
	if f.Status != RunAborted || f.Scanned != 0 || f.Eligible != 0 || f.KeysDeleted != 0 {
		t.Errorf("footer = %+v", f)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf(".inprogress file still there")
	}
}

// A run killed between creating its file and writing its header did
// nothing: its empty file is removed, not set aside as damage, and the
// trail still verifies.
func TestSealRemovesTheEmptyFileOfARunThatNeverStarted(t *testing.T) {
	root := t.TempDir()
	final := writeRun(t, root, "r")
	empty := filepath.Join(filepath.Dir(final), "retention-20991231T235959Z-z.jsonl.inprogress")
	if err := os.WriteFile(empty, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	sealed, err := SealAbandoned(root, sealNow)
	if err != nil || len(sealed) != 0 {
		t.Fatalf("SealAbandoned = %v, %v", sealed, err)
	}
	if _, err := os.Stat(empty); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the empty file is still there: %v", err)
	}
	if files, _ := filepath.Glob(filepath.Join(filepath.Dir(final), "*.corrupt")); len(files) != 0 {
		t.Fatalf("set aside: %v", files)
	}
	if rep, err := VerifyDir(root); err != nil || len(rep.Problems) != 0 || rep.Files != 1 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
}

func TestSealSetsAsideFilesItCannotSeal(t *testing.T) {
	good := fileLines(t, writeRun(t, t.TempDir(), "r"))
	join := func(lines ...[]byte) []byte { return append(bytes.Join(lines, []byte("\n")), '\n') }
	cases := []struct {
		name    string
		content []byte
		line    int
		reason  string
	}{
		{"torn header", good[0][:30], 1, "no valid header"},
		{"garbage header", join([]byte("garbage"), good[1]), 1, "no valid header"},
		{"item first", join(good[1], good[2]), 1, "no valid header"},
		{"damaged middle", join(good[0], good[1], []byte("garbage"), good[3]), 3, "lines follow it"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "2025-03")
			if err := os.MkdirAll(dir, 0o750); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "retention-20250301T020000Z-r.jsonl.inprogress")
			if err := os.WriteFile(path, c.content, 0o640); err != nil {
				t.Fatal(err)
			}
			sealed, err := SealAbandoned(root, sealNow)
			if len(sealed) != 0 {
				t.Fatalf("sealed %v", sealed)
			}
			corrupt := filepath.Join(dir, "retention-20250301T020000Z-r.jsonl.corrupt")
			assertProblem(t, err, corrupt, c.line, c.reason)
			data, rerr := os.ReadFile(corrupt)
			if rerr != nil || !bytes.Equal(data, c.content) {
				t.Fatalf("set-aside file changed or missing: %v", rerr)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf(".inprogress file still there")
			}
		})
	}
}

func TestSealFooterAlreadyWritten(t *testing.T) {
	// The run wrote and synced its footer but ended before the rename.
	root := t.TempDir()
	final := writeRun(t, root, "r")
	want, err := os.ReadFile(final)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(final, final+suffixInProgress); err != nil {
		t.Fatal(err)
	}
	sealed, err := SealAbandoned(root, sealNow)
	if err != nil || !slices.Equal(sealed, []string{final}) {
		t.Fatalf("SealAbandoned = %v, %v", sealed, err)
	}
	got, err := os.ReadFile(final)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("file changed while sealing: %v", err)
	}
}

func TestSealSkipsAndContinues(t *testing.T) {
	root := t.TempDir()
	mine := abandonRun(t, root, "mine", 1)
	other := abandonRun(t, root, "other", 2)
	h := testHeader()
	h.StartedAt = time.Date(2025, 4, 1, 0, 0, 0, 0, time.UTC)
	w, err := newWriter(root, "april", h, stepClock(h.StartedAt, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.f.Close(); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(root, "2025-03", "retention-20250301T010000Z-broken.jsonl.inprogress")
	if err := os.WriteFile(broken, []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	// Not month folders, or not abandoned files: never touched.
	stray := filepath.Join(root, "misc", "retention-x.jsonl.inprogress")
	if err := os.MkdirAll(filepath.Dir(stray), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stray, nil, 0o640); err != nil {
		t.Fatal(err)
	}

	// The skip path is spelt differently from the walk's.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, mine)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := SealAbandoned(root, sealNow, filepath.Join(filepath.Dir(rel), ".", filepath.Base(rel)))
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want the broken file reported", err)
	}
	want := []string{strings.TrimSuffix(other, suffixInProgress), strings.TrimSuffix(w.Path(), suffixInProgress)}
	if !slices.Equal(sealed, want) {
		t.Fatalf("sealed = %v, want %v", sealed, want)
	}
	for _, p := range []string{mine, stray} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was touched: %v", p, err)
		}
	}

	// Nothing is left to seal but the skipped file.
	again, err := SealAbandoned(root, sealNow, mine)
	if err != nil || len(again) != 0 {
		t.Fatalf("second SealAbandoned = %v, %v", again, err)
	}
}

func TestSealNeverReplacesASealedFile(t *testing.T) {
	root := t.TempDir()
	final := writeRun(t, root, "r")
	want, _ := os.ReadFile(final)
	path := final + suffixInProgress
	header := want[:bytes.IndexByte(want, '\n')+1]
	if err := os.WriteFile(path, header, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := SealAbandoned(root, sealNow); err == nil {
		t.Fatal("sealing over an existing sealed file succeeded")
	}
	got, _ := os.ReadFile(final)
	if !bytes.Equal(got, want) {
		t.Fatal("sealed file replaced")
	}
	left, _ := os.ReadFile(path)
	if !bytes.Equal(left, header) {
		t.Fatal("the file that could not be sealed was changed")
	}
}

func TestSealMissingRoot(t *testing.T) {
	sealed, err := SealAbandoned(filepath.Join(t.TempDir(), "none"), sealNow)
	if err != nil || sealed != nil {
		t.Fatalf("SealAbandoned = %v, %v; want nothing", sealed, err)
	}
}
