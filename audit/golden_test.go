package audit

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/audit")

// goldenRoot holds the committed audit files: one valid file exactly as the
// writer produces it with the test clock, and broken copies of it.
const goldenRoot = "../testdata/audit"

var goldenValid = filepath.Join(goldenRoot, "2025-03", "retention-20250301T020000Z-golden.jsonl")

// goldenBroken lists the broken copies: how each is derived from the valid
// file (lines 1-based: 1 header, 2-6 items, 7 footer) and the line
// VerifyFile must name.
var goldenBroken = []struct {
	name   string
	change func(lines [][]byte) [][]byte
	line   int
}{
	// One byte changed in an item line: m-0002 becomes m-0003.
	{"tampered-byte.jsonl", replaceIn(3, "m-0002", "m-0003"), 3},
	{"deleted-line.jsonl", func(l [][]byte) [][]byte { return slices.Delete(l, 3, 4) }, 4},
	{"reordered-seq.jsonl", func(l [][]byte) [][]byte { l[2], l[3] = l[3], l[2]; return l }, 3},
	{"wrong-counts.jsonl", replaceIn(7, `"purged":2`, `"purged":3`), 7},
}

// goldenBytes writes the golden run afresh and returns its bytes.
func goldenBytes(t testing.TB) []byte {
	t.Helper()
	data, err := os.ReadFile(writeRun(t, t.TempDir(), "golden"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func derive(valid []byte, change func([][]byte) [][]byte) []byte {
	lines := bytes.Split(bytes.TrimSuffix(valid, []byte("\n")), []byte("\n"))
	return append(bytes.Join(change(lines), []byte("\n")), '\n')
}

// The writer's output for a fixed clock and fixed records must not change
// without the golden file changing with it (go test ./audit -run Golden
// -update), so the format cannot drift silently.
func TestGoldenFileIsReproducible(t *testing.T) {
	fresh := goldenBytes(t)
	if *update {
		writeGolden(t, goldenValid, fresh)
		for _, b := range goldenBroken {
			writeGolden(t, filepath.Join(goldenRoot, "broken", b.name), derive(fresh, b.change))
		}
	}
	committed, err := os.ReadFile(goldenValid)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fresh, committed) {
		t.Fatalf("the writer's output differs from %s:\n got: %s\nwant: %s", goldenValid, fresh, committed)
	}
	if err := VerifyFile(goldenValid); err != nil {
		t.Fatalf("golden file does not verify: %v", err)
	}
}

func TestGoldenBrokenFilesFail(t *testing.T) {
	valid, err := os.ReadFile(goldenValid)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range goldenBroken {
		t.Run(b.name, func(t *testing.T) {
			path := filepath.Join(goldenRoot, "broken", b.name)
			committed, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(committed, derive(valid, b.change)) {
				t.Fatalf("%s is not the valid file with its one change", path)
			}
			assertProblem(t, VerifyFile(path), path, b.line, "")
		})
	}
}

// The golden tree is not a real audit folder: besides the valid file it
// holds the broken copies (outside a month folder, each a copy of the same
// run) and a README. Each broken copy must be reported at its damaged line.
func TestGoldenDirReport(t *testing.T) {
	rep, err := VerifyDir(goldenRoot)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Files != 1+len(goldenBroken) || rep.Verified != 1 {
		t.Fatalf("report = %+v", rep)
	}
	for _, p := range rep.Problems {
		if p.File == goldenValid {
			t.Errorf("the valid file is reported: %+v", p)
		}
	}
	for _, b := range goldenBroken {
		want := filepath.Join(goldenRoot, "broken", b.name)
		if !slices.ContainsFunc(rep.Problems, func(p Problem) bool { return p.File == want && p.Line == b.line }) {
			t.Errorf("no problem at %s:%d in %+v", want, b.line, rep.Problems)
		}
	}
	if readme := filepath.Join(goldenRoot, "README.md"); !slices.Equal(rep.Other, []string{readme}) {
		t.Errorf("other files = %v, want the README", rep.Other)
	}
	if !slices.IsSortedFunc(rep.Problems, func(a, b Problem) int { return strings.Compare(a.File, b.File) }) {
		t.Errorf("problems are not in file name order")
	}
}

func writeGolden(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
