package cli

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// built is the progressdb binary the process tests run, built once for
// the package (without the race detector) and removed by TestMain.
var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// binary returns the path of a progressdb binary built from this module.
func binary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "progressdb-cli-bin-")
		if built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "progressdb")
		out, err := exec.Command("go", "build", "-o", built.path, "github.com/progressdb/progressdb/server/cmd/progressdb").CombinedOutput()
		if err != nil {
			built.err = errors.New("go build: " + err.Error() + "\n" + string(out))
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
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
