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

func TestVerifyRoundTrip(t *testing.T) {
	root := t.TempDir()
	if err := VerifyFile(writeRun(t, root, "run-1")); err != nil {
		t.Fatalf("a file just written does not verify: %v", err)
	}

	// A run with no items at all, closed by a real clock.
	w, err := Create(root, "empty-run", testHeader())
	if err != nil {
		t.Fatal(err)
	}
	path, err := w.Close(Footer{FinishedAt: time.Now(), Status: RunCompleted})
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyFile(path); err != nil {
		t.Fatalf("an empty run does not verify: %v", err)
	}
}

// mutate rewrites the lines of the file at path (1-based line numbers in
// the callers' tables); the file then ends with a newline again.
func mutate(t *testing.T, path string, change func(lines [][]byte) [][]byte) {
	t.Helper()
	lines := change(fileLines(t, path))
	data := append(bytes.Join(lines, []byte("\n")), '\n')
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
}

// replaceIn changes the first old on line n (1-based).
func replaceIn(n int, old, new string) func([][]byte) [][]byte {
	return func(lines [][]byte) [][]byte {
		if !bytes.Contains(lines[n-1], []byte(old)) {
			panic("line lacks " + old)
		}
		lines[n-1] = bytes.Replace(lines[n-1], []byte(old), []byte(new), 1)
		return lines
	}
}

func TestVerifyFindsTheBrokenLine(t *testing.T) {
	// Lines: 1 header, 2-6 items (t-0001, m-0002, t-0003, t-0004, t-0005), 7 footer.
	cases := []struct {
		name   string
		change func([][]byte) [][]byte
		line   int
		reason string
	}{
		{"changed item byte", replaceIn(3, "m-0002", "m-0003"), 3, "does not match prev on line 4"},
		{"changed item before footer", replaceIn(6, "disk full", "disk fill"), 6, "does not match prev on line 7"},
		{"changed header", replaceIn(1, `"epoch":7`, `"epoch":8`), 1, "does not match prev on line 2"},
		{"changed prev", func(l [][]byte) [][]byte {
			i := bytes.Index(l[3], []byte(`"prev":"`)) + len(`"prev":"`)
			l[3][i] ^= 1
			return l
		}, 4, "nor does the next line's prev"},
		{"deleted middle line", func(l [][]byte) [][]byte { return slices.Delete(l, 3, 4) }, 4, "seq is 4, want 3"},
		{"reordered lines", func(l [][]byte) [][]byte { l[2], l[3] = l[3], l[2]; return l }, 3, "seq is 3, want 2"},
		{"repeated line", func(l [][]byte) [][]byte { return slices.Insert(l, 3, l[2]) }, 4, "seq is 2, want 3"},
		{"changed seq", replaceIn(5, `"seq":4`, `"seq":5`), 5, "seq is 5, want 4"},
		{"changed run id", replaceIn(5, `"run_id":"run-1"`, `"run_id":"run-2"`), 5, `run_id is "run-2"`},
		{"footer purged count", replaceIn(7, `"purged":2`, `"purged":3`), 7, "footer purged is 3, items sum to 2"},
		{"footer keys count", replaceIn(7, `"keys_deleted":19`, `"keys_deleted":18`), 7, "footer keys_deleted is 18, items sum to 19"},
		{"footer eligible too low", replaceIn(7, `"eligible":3`, `"eligible":2`), 7, "less than purged+failed"},
		{"no footer", func(l [][]byte) [][]byte { return l[:6] }, 6, "no footer"},
		{"record after footer", func(l [][]byte) [][]byte { return append(l, l[1]) }, 8, "record after the footer"},
		{"no header", func(l [][]byte) [][]byte { return l[1:] }, 1, "first record is retention_audit_item"},
		{"second header", func(l [][]byte) [][]byte { return slices.Insert(l, 1, l[0]) }, 2, "second header"},
		{"unknown status", replaceIn(5, `"status":"skipped"`, `"status":"lost"`), 5, `status "lost" is unknown`},
		{"purged without time", replaceIn(2, `"purged_at"`, `"purged_ts"`), 2, "purged_at must be present"},
		{"not json", replaceIn(4, `{`, `[`), 4, "not a JSON object"},
		{"banned field", replaceIn(4, `"status"`, `"author":"bob","status"`), 4, "IDs and timestamps only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeRun(t, t.TempDir(), "run-1")
			mutate(t, path, c.change)
			assertProblem(t, VerifyFile(path), path, c.line, c.reason)
		})
	}
}

func TestVerifyTornAndEmptyFiles(t *testing.T) {
	dir := t.TempDir()
	path := writeRun(t, dir, "r")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bytes.TrimSuffix(data, []byte("\n")), 0o640); err != nil {
		t.Fatal(err)
	}
	assertProblem(t, VerifyFile(path), path, 7, "no newline")

	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	assertProblem(t, VerifyFile(empty), empty, 0, "empty file")

	if err := VerifyFile(filepath.Join(dir, "missing.jsonl")); err == nil || errors.Is(err, ErrCorrupt) {
		t.Fatalf("a missing file: %v, want a read error that is not ErrCorrupt", err)
	}
}

func TestVerifyDir(t *testing.T) {
	root := t.TempDir()
	good := writeRun(t, root, "a")

	h := testHeader()
	h.StartedAt = time.Date(2025, 4, 2, 3, 4, 5, 0, time.UTC)
	w, err := newWriter(root, "b", h, stepClock(h.StartedAt, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(Footer{FinishedAt: h.StartedAt, Status: RunCompleted}); err != nil {
		t.Fatal(err)
	}

	bad := writeRun(t, root, "c")
	mutate(t, bad, replaceIn(3, "m-0002", "m-0003"))

	open, err := Create(root, "d", testHeader())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { open.Close(Footer{Status: RunCompleted}) })

	nested := filepath.Join(root, "copies", "deep")
	if err := os.MkdirAll(nested, 0o750); err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(nested, "x.jsonl")
	data, _ := os.ReadFile(good)
	if err := os.WriteFile(copied, data, 0o640); err != nil {
		t.Fatal(err)
	}
	corrupt := filepath.Join(root, "2025-03", "retention-20250301T000000Z-e.jsonl.corrupt")
	if err := os.WriteFile(corrupt, []byte("garbage"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "retention.lock"), []byte("{}"), 0o640); err != nil {
		t.Fatal(err)
	}

	rep, err := VerifyDir(root)
	if err != nil {
		t.Fatal(err)
	}
	// Verified: a and b. Not c (a changed line), nor the copy, whose own
	// lines chain but whose name and links are wrong.
	if rep.Files != 4 || rep.Verified != 2 {
		t.Errorf("files %d verified %d, want 4 and 2", rep.Files, rep.Verified)
	}
	// Everything but the good files and the lease is reported: the changed
	// line, the copy (its name, its duplicate content, its second empty
	// prev_file), the in-progress file nobody runs, the set-aside file.
	want := []struct {
		file string
		line int
	}{{corrupt, 0}, {bad, 3}, {open.Path(), 0}, {copied, 1}, {copied, 1}, {copied, 1}}
	if len(rep.Problems) != len(want) {
		t.Fatalf("problems = %+v", rep.Problems)
	}
	for i, w := range want {
		if p := rep.Problems[i]; p.File != w.file || p.Line != w.line {
			t.Errorf("problem %d = %+v, want %s:%d", i, p, w.file, w.line)
		}
	}
	if !slices.Equal(rep.InProgress, []string{open.Path()}) {
		t.Errorf("in progress = %v", rep.InProgress)
	}
	if !slices.Equal(rep.Quarantined, []string{corrupt}) {
		t.Errorf("quarantined = %v", rep.Quarantined)
	}

	// The same tree while run d holds the lease: its file is not a problem.
	live, err := VerifyDirWith(root, VerifyOptions{Live: func(h Header) bool { return h.Epoch == testHeader().Epoch }})
	if err != nil {
		t.Fatal(err)
	}
	if live.Live != open.Path() || len(live.Problems) != len(want)-1 {
		t.Errorf("live %q, problems %+v", live.Live, live.Problems)
	}

	if _, err := VerifyDir(filepath.Join(root, "missing")); err == nil {
		t.Error("VerifyDir of a missing folder succeeded")
	}
	if _, err := VerifyDir(good); err == nil {
		t.Error("VerifyDir of a file succeeded")
	}

	emptyRep, err := VerifyDir(t.TempDir())
	if err != nil || emptyRep.Files != 0 || emptyRep.Problems == nil || emptyRep.InProgress == nil {
		t.Errorf("empty folder: %+v, %v (lists must be empty, not nil, for JSON)", emptyRep, err)
	}
}

func assertProblem(t *testing.T, err error, file string, line int, reason string) {
	t.Helper()
	var p *Problem
	if !errors.As(err, &p) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want a *Problem wrapping ErrCorrupt", err)
	}
	if p.File != file || p.Line != line || !strings.Contains(p.Reason, reason) {
		t.Fatalf("problem = %s:%d: %s\nwant     %s:%d: …%s…", p.File, p.Line, p.Reason, file, line, reason)
	}
}

// TestVerifyDirShardTrails: a cluster node's audit root holds one trail per
// shard under shards/<n>/, each a chain of its own (spec §11); each is
// verified as such, and a change in one is found and named.
func TestVerifyDirShardTrails(t *testing.T) {
	root := t.TempDir()
	var files []string
	for _, shard := range []string{"0", "1", "3.before-20250401T000000Z"} {
		dir := filepath.Join(root, ShardsDir, shard)
		files = append(files,
			writeRunAt(t, dir, "a", fixedStart, Options{}),
			writeRunAt(t, dir, "b", fixedStart.Add(time.Hour), Options{}))
	}
	rep, err := VerifyDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Files != 6 || rep.Verified != 6 || len(rep.Problems) != 0 {
		t.Fatalf("files %d verified %d problems %v, want 6, 6 and none", rep.Files, rep.Verified, rep.Problems)
	}

	mutate(t, files[2], replaceIn(3, "m-0002", "m-0003")) // shard 1's first file
	if err := os.WriteFile(filepath.Join(root, ShardsDir, "notes.txt"), []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	rep, err = VerifyDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Files != 6 || rep.Verified != 5 {
		t.Errorf("files %d verified %d, want 6 and 5 (shard 1's changed file fails)", rep.Files, rep.Verified)
	}
	named := map[string]bool{}
	for _, p := range rep.Problems {
		named[p.File] = true
	}
	if !named[files[2]] || !named[filepath.Join(root, ShardsDir, "notes.txt")] {
		t.Errorf("problems %v: want the changed file of shard 1 and the stray file named", rep.Problems)
	}
	for _, f := range append(files[:2:2], files[4:]...) {
		if named[f] {
			t.Errorf("problems %v name %s of an untouched shard", rep.Problems, f)
		}
	}
}
