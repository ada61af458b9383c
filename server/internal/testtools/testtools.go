// Package testtools lets a test that needs an outside program (promtool,
// zsh, kubectl, …) find it, and say so where `make test` shows it when the
// program is missing: go test prints nothing of a passing package's skips
// unless -v, so a skip alone would pass without a word. It also starts a
// test binary's own helper test as a child process (StartChild), for
// tests that kill one, and lets a package whose tests mostly wait run
// more of them at once (OverlapWaits).
package testtools

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// SkipLogEnv names a file to which every skip for a missing program appends
// one line; `make test` prints the file after the suite.
const SkipLogEnv = "PROGRESSDB_TEST_SKIPS"

// Need returns the path of program, or skips t naming the program and how
// to install it (install: e.g. "Debian package prometheus").
func Need(t testing.TB, program, install string) string {
	t.Helper()
	path, err := exec.LookPath(program)
	if err == nil {
		return path
	}
	Lack(t, program+" not found", install)
	return ""
}

// Lack skips t for what is missing here (e.g. "node 20.18 or later") and
// how to get it, with the same record as Need.
func Lack(t testing.TB, what, install string) {
	t.Helper()
	msg := fmt.Sprintf("SKIP %s: %s (%s)", t.Name(), what, install)
	if log := os.Getenv(SkipLogEnv); log != "" {
		if f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			fmt.Fprintln(f, msg)
			f.Close()
		}
	}
	t.Skip(msg)
}
