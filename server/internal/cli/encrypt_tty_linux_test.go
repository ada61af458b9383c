package cli

import (
	"bytes"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// On a terminal, `keys encrypt-existing` draws its progress on one line of
// stderr, redrawn in place (threads done of the total, then the erase
// step), and clears it at the end: no line per thread.
func TestKeysEncryptExistingDrawsOneLineOnATerminal(t *testing.T) {
	environ := withEnv(plainDatabase(t, 300), "PROGRESSDB_LOG_LEVEL", "warn")
	ptmx, pts := openTerminal(t)
	cmd := exec.Command(binary(t), "keys", "encrypt-existing")
	cmd.Env = environ
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, pts
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	screen := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, ptmx) // ends with EIO once the last writer is gone
		screen <- b.String()
	}()
	err := cmd.Wait()
	pts.Close()
	got := <-screen
	if err != nil || !strings.Contains(out.String(), "in 300 threads") {
		t.Fatalf("exit: %v\n%s\n%q", err, out.String(), got)
	}
	if !strings.Contains(got, "\r\x1b[K") || !strings.Contains(got, "] 300/300 threads") || !strings.Contains(got, "erasing: ") {
		t.Fatalf("no line redrawn in place with 300/300 threads and the erase step: %q", got)
	}
	if n := strings.Count(got, "\n"); n > 0 {
		t.Fatalf("%d lines on the terminal, want the one line redrawn: %q", n, got)
	}
	if !strings.HasSuffix(got, "\r\x1b[K") {
		t.Fatalf("the line is not cleared at the end: %q", got)
	}
}
