package testtools

import (
	"bufio"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// ChildTimeout is how long Line waits by default for a child's next
// line and Wait for it to exit: a hung child fails its test after it instead of
// hanging it until go test's timeout, which names no test.
const ChildTimeout = time.Minute

// Child is this test binary run again on one helper test (StartChild).
// Cmd is the started process: kill it (SIGKILL) whenever the test likes.
// Timeout is how long Line and Wait wait (ChildTimeout unless changed).
type Child struct {
	Cmd     *exec.Cmd
	Timeout time.Duration
	t       testing.TB

	stdin *os.File // the write end of the child's stdin

	mu    sync.Mutex
	lines []string      // read from its stdout, not yet taken by Line
	ended bool          // its stdout reached the end
	more  chan struct{} // signalled when lines or ended change

	waitOnce sync.Once
	exited   chan struct{} // closed once Cmd.Wait returned waitErr
	waitErr  error
}

// StartChild starts this test binary again to run only the test named
// test, a helper that reads its instructions from env (added to this
// process's environment) and reports on its stdout, read with Line; its
// stderr is this process's. Its stdin stays open until CloseStdin, so a
// helper can hold something until its stdin ends. The child is killed
// and reaped when t ends, so a crash test can kill -9 it whenever it
// likes and need not clean up.
func StartChild(t testing.TB, test string, env ...string) *Child {
	t.Helper()
	c := &Child{Cmd: exec.Command(os.Args[0], "-test.run=^"+test+"$"), Timeout: ChildTimeout, t: t,
		more: make(chan struct{}, 1), exited: make(chan struct{})}
	// The child's temporary folders go inside one of ours: a child killed
	// with SIGKILL never removes its own, and they would pile up.
	c.Cmd.Env = append(append(os.Environ(), "TMPDIR="+t.TempDir()), env...)
	c.Cmd.Stderr = os.Stderr
	// Pipes of our own rather than Cmd's: Wait closes those, and would
	// drop what the child wrote and Line has not read yet.
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Cmd.Stdin, c.Cmd.Stdout, c.stdin = inR, outW, inW
	err = c.Cmd.Start()
	_, _ = inR.Close(), outW.Close() // the child's ends, now its own
	if err != nil {
		_, _ = inW.Close(), outR.Close()
		t.Fatal(err)
	}
	go c.read(outR)
	t.Cleanup(func() {
		_ = c.stdin.Close()
		_ = c.Cmd.Process.Kill()
		<-c.waited()
		_ = outR.Close()
	})
	return c
}

// read keeps every line of the child's stdout for Line, without bound:
// a child is never blocked on a line nobody takes.
func (c *Child) read(out *os.File) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		c.mu.Lock()
		c.lines = append(c.lines, sc.Text())
		c.mu.Unlock()
		c.signal()
	}
	c.mu.Lock()
	c.ended = true
	c.mu.Unlock()
	c.signal()
}

func (c *Child) signal() {
	select {
	case c.more <- struct{}{}:
	default:
	}
}

// Line returns the child's next line of stdout, and false once its
// stdout ended (it exited or was killed) with every line taken. A child
// silent for Timeout fails the test.
func (c *Child) Line() (string, bool) {
	c.t.Helper()
	timeout := time.NewTimer(c.Timeout)
	defer timeout.Stop()
	for {
		c.mu.Lock()
		if len(c.lines) > 0 {
			line := c.lines[0]
			c.lines = c.lines[1:]
			c.mu.Unlock()
			return line, true
		}
		ended := c.ended
		c.mu.Unlock()
		if ended {
			return "", false
		}
		select {
		case <-c.more:
		case <-timeout.C:
			c.t.Fatalf("child %s said nothing for %s", c.Cmd.Args[1], c.Timeout)
		}
	}
}

// CloseStdin ends the child's stdin: a helper holding something until
// then lets go.
func (c *Child) CloseStdin() error { return c.stdin.Close() }

// Kill kills the child with SIGKILL (no chance to clean up) and reaps it.
func (c *Child) Kill() {
	c.t.Helper()
	if err := c.Cmd.Process.Kill(); err != nil {
		c.t.Fatal(err)
	}
	<-c.waited()
}

// Wait waits for the child to exit and returns how it did (Cmd.Wait's
// error); a child still running after Timeout fails the test.
func (c *Child) Wait() error {
	c.t.Helper()
	select {
	case <-c.waited():
		return c.waitErr
	case <-time.After(c.Timeout):
		c.t.Fatalf("child %s still running after %s", c.Cmd.Args[1], c.Timeout)
		return nil
	}
}

// waited reaps the child once, whoever asks first, and says when.
func (c *Child) waited() <-chan struct{} {
	c.waitOnce.Do(func() {
		go func() {
			c.waitErr = c.Cmd.Wait()
			close(c.exited)
		}()
	})
	return c.exited
}
