// Command testreport runs `go test -json` with the arguments it is given,
// prints what plain `go test` would (each package's ok or FAIL line, the
// output of failed tests only) as the events arrive, and ends with the
// slowest tests of the run, so that a test that grows is seen when it
// does. It exits with go test's status. `make test` runs the suite
// through it:
//
//	go run ./server/internal/testtools/testreport -slowest 10 -- -race -count=1 ./...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run parses the flags, runs go test and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testreport", flag.ContinueOnError)
	fs.SetOutput(stderr)
	goTool := fs.String("go", "go", "the go command to run")
	slowest := fs.Int("slowest", 10, "how many of the slowest tests to print at the end (0: none)")
	in := fs.String("in", "", "read a saved `go test -json` output from this file instead of running go test")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: testreport [-go GO] [-slowest N] -- GO-TEST-ARGS…")
		fmt.Fprintln(stderr, "       testreport -in FILE [-slowest N]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *slowest < 0 {
		fmt.Fprintf(stderr, "testreport: -slowest %d: must be 0 or more\n", *slowest)
		return 2
	}
	if *in != "" {
		return replay(*in, *slowest, stdout, stderr)
	}

	// Ctrl-C reaches go test through the terminal's process group; this
	// process waits for it to stop and still prints what it saw.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := exec.CommandContext(ctx, *goTool, append([]string{"test", "-json"}, fs.Args()...)...)
	cmd.Stderr = stderr
	events, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(stderr, "testreport:", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "testreport:", err)
		return 1
	}
	r := newReport(stdout)
	readErr := r.read(events)
	waitErr := cmd.Wait()
	r.finish(*slowest)
	if readErr != nil {
		fmt.Fprintln(stderr, "testreport: reading go test -json:", readErr)
	}
	var exit *exec.ExitError
	switch {
	case errors.As(waitErr, &exit):
		if code := exit.ExitCode(); code > 0 {
			return code
		}
		return 1
	case waitErr != nil:
		fmt.Fprintln(stderr, "testreport:", waitErr)
		return 1
	case readErr != nil || r.failed:
		return 1
	}
	return 0
}

// replay reports on a saved `go test -json` output.
func replay(path string, slowest int, stdout, stderr io.Writer) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(stderr, "testreport: -in:", err)
		return 2
	}
	defer f.Close()
	r := newReport(stdout)
	err = r.read(f)
	r.finish(slowest)
	if err != nil {
		fmt.Fprintf(stderr, "testreport: reading %s: %v\n", path, err)
		return 1
	}
	if r.failed {
		return 1
	}
	return 0
}
