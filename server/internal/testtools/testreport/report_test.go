package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// writeModule writes a module of three packages: good passes (one test
// logs, one is skipped), bad has a test that fails in one subtest of two
// and one that passes, and gone's test process exits in the middle of a
// test.
func writeModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.22\n",
		"good/good_test.go": `package good

import (
	"testing"
	"time"
)

func TestQuick(t *testing.T) { t.Log("quiet when passing") }

func TestSlow(t *testing.T) { time.Sleep(300 * time.Millisecond) }

func TestSkipped(t *testing.T) { t.Skip("nothing to do here") }
`,
		"bad/bad_test.go": `package bad

import "testing"

func TestBroken(t *testing.T) {
	t.Log("parent log line")
	t.Run("fine", func(t *testing.T) { t.Log("fine subtest log") })
	t.Run("wrong", func(t *testing.T) { t.Errorf("got %d, want %d", 1, 2) })
}

func TestAlsoFine(t *testing.T) { t.Log("another passing log") }
`,
		"par/par_test.go": `package par

import (
	"testing"
	"time"
)

func TestParallelHalves(t *testing.T) {
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			time.Sleep(500 * time.Millisecond)
		})
	}
}
`,
		"gone/gone_test.go": `package gone

import (
	"os"
	"testing"
)

func TestExits(t *testing.T) {
	t.Log("last words")
	os.Exit(3)
}
`,
	}
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The report prints what plain go test prints (ok lines, the output of
// failed tests only) and the slowest tests, and keeps go test's status.
func TestReportOfARealRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test")
	}
	t.Chdir(writeModule(t))
	var out, errb bytes.Buffer
	code := run([]string{"-slowest", "3", "--", "-count=1", "./good", "./bad", "./gone"}, &out, &errb)
	got := out.String()
	if code != 1 {
		t.Errorf("exit status %d, want 1 (a test failed)\n%s%s", code, got, errb.String())
	}
	for _, want := range []string{
		"ok  \texample.com/m/good\t",
		"--- FAIL: TestBroken ",
		"parent log line",
		"--- FAIL: TestBroken/wrong ",
		"got 1, want 2",
		"FAIL\texample.com/m/bad\t",
		// A test that never ended prints what it wrote.
		"last words",
		"FAIL\texample.com/m/gone\t",
		"slowest 3 tests:",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"quiet when passing", "fine subtest log", "another passing log", "=== RUN", "nothing to do here"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("output has %q, which plain go test does not print:\n%s", unwanted, got)
		}
	}
	// The slowest test comes first, named with its package; skipped
	// tests are not timed.
	_, slowest, _ := strings.Cut(got, "slowest 3 tests:\n")
	lines := strings.Split(strings.TrimSpace(slowest), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^\s*\S+s  TestSlow  example.com/m/good$`).MatchString(lines[0]) {
		t.Errorf("slowest tests:\n%s\nwant 3 lines, TestSlow of example.com/m/good first", slowest)
	}
	if strings.Contains(slowest, "TestSkipped") {
		t.Errorf("a skipped test is listed among the slowest:\n%s", slowest)
	}
}

// A test whose subtests run in parallel is timed until its subtests end,
// not by its own body, which returns at once.
func TestReportTimesParallelSubtests(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test")
	}
	t.Chdir(writeModule(t))
	var out, errb bytes.Buffer
	if code := run([]string{"-slowest", "1", "--", "-count=1", "./par"}, &out, &errb); code != 0 {
		t.Fatalf("exit status %d\n%s%s", code, out.String(), errb.String())
	}
	m := regexp.MustCompile(`(?m)^\s*(\S+)  TestParallelHalves  example.com/m/par$`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("TestParallelHalves not listed:\n%s", out.String())
	}
	if d, err := time.ParseDuration(m[1]); err != nil || d < 450*time.Millisecond {
		t.Errorf("TestParallelHalves timed %s (%v), want at least its subtests' 500ms", m[1], err)
	}
}

// A run whose tests all pass exits 0.
func TestReportPassingRunExitsZero(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test")
	}
	t.Chdir(writeModule(t))
	var out, errb bytes.Buffer
	if code := run([]string{"--", "-count=1", "./good"}, &out, &errb); code != 0 {
		t.Errorf("exit status %d, want 0\n%s%s", code, out.String(), errb.String())
	}
}

// A package that does not build fails the run and its compiler errors are
// printed.
func TestReportBuildFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test")
	}
	dir := writeModule(t)
	if err := os.WriteFile(filepath.Join(dir, "good", "broken_test.go"), []byte("package good\n\nfunc f() { undefinedName() }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	var out, errb bytes.Buffer
	code := run([]string{"--", "-count=1", "./good"}, &out, &errb)
	if code == 0 {
		t.Errorf("exit status 0 for a package that does not build")
	}
	if all := out.String() + errb.String(); !strings.Contains(all, "undefinedName") {
		t.Errorf("the compiler's error is not printed:\n%s", all)
	}
}

// Bad flags are a usage error (exit 2) naming the flag.
func TestReportBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-slowest", "-1"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "-slowest -1") {
		t.Errorf("exit %d, stderr %q; want 2 naming -slowest -1", code, errb.String())
	}
}
