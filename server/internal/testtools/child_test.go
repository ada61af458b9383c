package testtools_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/testtools"
)

// envChild selects what TestChildHelper does in a child process.
const envChild = "PROGRESSDB_TESTTOOLS_CHILD"

// TestChildHelper is not a test: the tests below run it in a child.
func TestChildHelper(t *testing.T) {
	switch os.Getenv(envChild) {
	case "":
		return
	case "echo": // three lines, then holds until its stdin ends
		fmt.Println("one\ntwo\nthree")
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(7)
	case "silent":
		time.Sleep(time.Hour)
	case "waits-on-silent": // a test whose child falls silent
		c := testtools.StartChild(t, "TestChildHelper", envChild+"=silent")
		c.Timeout = 200 * time.Millisecond
		c.Line()
		fmt.Println("Line returned")
	}
}

// A child's lines come in order, its stdin stays open until closed, and
// Wait says how it exited; after its last line Line says it ended.
func TestChildLinesStdinAndWait(t *testing.T) {
	c := testtools.StartChild(t, "TestChildHelper", envChild+"=echo")
	for _, want := range []string{"one", "two", "three"} {
		if got, ok := c.Line(); !ok || got != want {
			t.Fatalf("Line = %q, %v; want %q", got, ok, want)
		}
	}
	if err := c.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if got, ok := c.Line(); ok {
		t.Fatalf("Line after the child exited = %q, want none", got)
	}
	var exit *exec.ExitError
	if err := c.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Fatalf("Wait = %v, want exit status 7", err)
	}
}

// A silent child fails its test after Timeout instead of hanging it:
// the test that waits on one is itself run in a child, whose failure is
// looked at here.
func TestChildSilentFailsTheTest(t *testing.T) {
	c := testtools.StartChild(t, "TestChildHelper", envChild+"=waits-on-silent")
	var out []string
	for line, ok := c.Line(); ok; line, ok = c.Line() {
		out = append(out, line)
	}
	all := strings.Join(out, "\n")
	if err := c.Wait(); err == nil || !strings.Contains(all, "said nothing for 200ms") || strings.Contains(all, "Line returned") {
		t.Fatalf("the waiting test: %v, output:\n%s", err, all)
	}
}
