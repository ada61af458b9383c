package cli

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os/exec"
	"testing"

	"github.com/progressdb/progressdb/internal/testbin"
	"github.com/progressdb/progressdb/server/internal/testtools"
)

// Tests that mostly wait (on processes, etcd, a timeout) call t.Parallel:
// Main takes its environment as an argument and every test has its own
// folders and ports, so they overlap safely, two per core (the package
// used about a quarter of a core with one per core).
func TestMain(m *testing.M) {
	flag.Parse()
	testtools.OverlapWaits(2)
	testbin.Main(m)
}

// binary returns the path of a progressdb binary built from this module
// (without the race detector), shared by the package's tests.
func binary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	return testbin.Path(t, "progressdb")
}

// runBinary runs the built binary with exactly environ and returns its
// exit status and output.
func runBinary(t *testing.T, environ []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCommand(t, exec.Command(binary(t), args...), environ)
}

// runBinaryIn runs the built binary in folder dir with exactly environ.
func runBinaryIn(t *testing.T, dir string, environ []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Dir = dir
	return runCommand(t, cmd, environ)
}

// runBinaryStdin runs the built binary with exactly environ, reading stdin.
func runBinaryStdin(t *testing.T, environ []string, stdin io.Reader, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Stdin = stdin
	return runCommand(t, cmd, environ)
}

// runCommand runs cmd with exactly environ and returns its exit status and
// output; only a failure to start it fails the test.
func runCommand(t *testing.T, cmd *exec.Cmd, environ []string) (code int, stdout, stderr string) {
	t.Helper()
	cmd.Env = environ
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("%v: %v", cmd.Args[1:], err)
	}
	return code, out.String(), errb.String()
}
