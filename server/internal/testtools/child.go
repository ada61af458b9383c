package testtools

import (
	"io"
	"os"
	"os/exec"
	"testing"
)

// StartChild starts this test binary again to run only the test named
// test, a helper that reads its instructions from env (added to this
// process's environment) and reports on its stdout, returned here; its
// stderr is this process's. The child is killed and reaped when t ends,
// so a crash test can kill -9 it whenever it likes and need not clean up.
func StartChild(t testing.TB, test string, env ...string) (*exec.Cmd, io.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, stdout
}
