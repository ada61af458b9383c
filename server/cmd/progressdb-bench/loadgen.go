package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// loadgenEnv, set in the environment, makes progressdb-bench a closed-loop
// HTTP load generator instead (runLoadgen). B14 runs it as a child process
// so that the server's process CPU time holds the server's work alone, as
// it would behind clients on other machines.
const loadgenEnv = "PROGRESSDB_BENCH_LOADGEN"

// The load generator's protocol on its standard streams: after its untimed
// warm-up it prints "ready", waits for a line on stdin, runs the timed loop
// and prints "done <requests>".
const (
	loadgenReady = "ready"
	loadgenDone  = "done"
)

// runLoadgen sends requests from -clients keep-alive connections in a
// closed loop: first -warm of them untimed, then until -dur has passed or
// -max requests completed. Every answer must have status -status.
func runLoadgen(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	method := fs.String("method", http.MethodGet, "request method")
	url := fs.String("url", "", "request URL")
	body := fs.String("body", "", "request body (JSON)")
	status := fs.Int("status", http.StatusOK, "expected status")
	clients := fs.Int("clients", 1, "concurrent clients")
	warm := fs.Int64("warm", 100, "untimed requests first")
	dur := fs.Duration("dur", 2*time.Second, "timed duration")
	maxOps := fs.Int64("max", 1<<62, "at most this many timed requests")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	tr := &http.Transport{MaxIdleConns: *clients + 4, MaxIdleConnsPerHost: *clients + 4}
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	one := func() error {
		var rd io.Reader
		if *body != "" {
			rd = strings.NewReader(*body)
		}
		req, err := http.NewRequest(*method, *url, rd)
		if err != nil {
			return err
		}
		if rd != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != *status {
			return fmt.Errorf("%s %s: status %d, want %d", *method, *url, resp.StatusCode, *status)
		}
		return nil
	}
	loop := func(d time.Duration, limit int64) (int64, error) {
		var (
			done, ok atomic.Int64
			first    atomic.Value
			wg       sync.WaitGroup
		)
		deadline := time.Now().Add(d)
		for range *clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) && done.Add(1) <= limit {
					if err := one(); err != nil {
						first.CompareAndSwap(nil, err)
						return
					}
					ok.Add(1)
				}
			}()
		}
		wg.Wait()
		if err, _ := first.Load().(error); err != nil {
			return 0, err
		}
		return ok.Load(), nil
	}
	if _, err := loop(time.Hour, *warm); err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 1
	}
	fmt.Fprintln(stdout, loadgenReady)
	if _, err := bufio.NewReader(stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 1
	}
	n, err := loop(*dur, *maxOps)
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s %d\n", loadgenDone, n)
	tr.CloseIdleConnections()
	return 0
}

// loadSpec is one load generator run.
type loadSpec struct {
	method, url, body string
	status            int
	clients           int
	warm              int64
	dur               time.Duration
	maxOps            int64
	prof              *cellProfile // nil: no profiles
}

// cpuLoad is what a measured stretch cost this process.
type cpuLoad struct {
	n       int64
	cpu     time.Duration // user and system time of this process
	dur     time.Duration
	mallocs uint64 // heap allocations of this process
}

func (l cpuLoad) perOp() time.Duration {
	if l.n == 0 {
		return 0
	}
	return l.cpu / time.Duration(l.n)
}

// allocsPerOp is the heap allocations per operation, Pebble's included.
func (l cpuLoad) allocsPerOp() float64 {
	if l.n == 0 {
		return 0
	}
	return float64(l.mallocs) / float64(l.n)
}

// mallocs is the number of heap allocations this process has made. It
// stops the world briefly, so it is read only at a cell's edges.
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// driveLoadgen runs the load generator as a child process against a server
// in this process and returns this process's CPU time over its timed loop.
func driveLoadgen(ctx context.Context, sp loadSpec) (cpuLoad, error) {
	exe, err := os.Executable()
	if err != nil {
		return cpuLoad{}, err
	}
	cmd := exec.CommandContext(ctx, exe,
		"-method", sp.method, "-url", sp.url, "-body", sp.body,
		"-status", fmt.Sprint(sp.status), "-clients", fmt.Sprint(sp.clients),
		"-warm", fmt.Sprint(sp.warm), "-dur", sp.dur.String(), "-max", fmt.Sprint(sp.maxOps))
	cmd.Env = append(os.Environ(), loadgenEnv+"=1")
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	in, err := cmd.StdinPipe()
	if err != nil {
		return cpuLoad{}, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return cpuLoad{}, err
	}
	if err := cmd.Start(); err != nil {
		return cpuLoad{}, err
	}
	fail := func(err error) (cpuLoad, error) {
		_ = in.Close()
		werr := cmd.Wait()
		return cpuLoad{}, errors.Join(err, werr, errors.New(strings.TrimSpace(errBuf.String())))
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != loadgenReady {
		return fail(errors.New("load generator: no ready line"))
	}
	if err := sp.prof.start(); err != nil {
		return fail(err)
	}
	m0 := mallocs()
	c0, t0 := cpuTime(), time.Now()
	if _, err := io.WriteString(in, "go\n"); err != nil {
		return fail(errors.Join(err, sp.prof.stop()))
	}
	if !lines.Scan() {
		return fail(errors.Join(errors.New("load generator: no done line"), sp.prof.stop()))
	}
	c1, t1 := cpuTime(), time.Now()
	m1 := mallocs()
	if err := sp.prof.stop(); err != nil {
		return fail(err)
	}
	var n int64
	if _, err := fmt.Sscanf(lines.Text(), loadgenDone+" %d", &n); err != nil {
		return fail(fmt.Errorf("load generator: %q: %w", lines.Text(), err))
	}
	_ = in.Close()
	if err := cmd.Wait(); err != nil {
		return cpuLoad{}, fmt.Errorf("load generator: %w: %s", err, strings.TrimSpace(errBuf.String()))
	}
	return cpuLoad{n: n, cpu: c1 - c0, dur: t1.Sub(t0), mallocs: m1 - m0}, nil
}
