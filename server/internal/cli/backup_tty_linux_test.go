package cli

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// openTerminal opens a new pseudo-terminal and returns its two ends.
func openTerminal(t *testing.T) (ptmx, pts *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("SKIP: no pseudo-terminal (/dev/ptmx): %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pts.Close() })
	return ptmx, pts
}

// Issue 27, problem 8, through the binary: `backup create --out -` with a
// terminal on standard output is refused (exit 2) before any backup is
// taken; before, the archive's bytes went to the screen.
func TestBackupCreateRefusesATerminal(t *testing.T) {
	h := newHarness(t)
	h.createDB()
	_, pts := openTerminal(t)
	cmd := exec.Command(binary(t), "backup", "create", "--out", "-")
	cmd.Env = serverEnv(h)
	var errb strings.Builder
	cmd.Stdout, cmd.Stderr = pts, &errb
	err := cmd.Run()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != exitUsage || !strings.Contains(errb.String(), "terminal") {
		t.Fatalf("backup create --out - to a terminal: %v, want exit 2 naming the terminal\n%s", err, errb.String())
	}
}
