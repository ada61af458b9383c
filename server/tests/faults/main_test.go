package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/progressdb/progressdb/internal/testbin"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/testtools"
)

// binary is the progressdb binary TestMain gets from testbin, without the
// race detector so that the processes under test run at production speed.
var binary string

// suite holds the settings of this run, read once from the environment.
var suite struct {
	long   bool   // the long mode of `make faults`
	trials int    // crash trials
	seed   uint64 // seed of the first trial; trial i uses seed+i
}

func TestMain(m *testing.M) {
	flag.Parse()
	// The tests mostly wait on the processes they start and on timers
	// (the package used a third of a core with one test per core).
	testtools.OverlapWaits(2)
	if err := configure(); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "progressdb-faults-ca-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	caDir = dir
	code := 1
	if binary, err = testbin.Build("progressdb"); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
	} else {
		code = m.Run()
	}
	testbin.Remove()
	os.RemoveAll(dir)
	os.Exit(code)
}

// configure reads PROGRESSDB_FAULT_TRIALS (set: the long mode, with that
// many crash trials; unset: the short mode of `make test`, one trial of
// each kill scenario, the repetitions being `make faults`' job) and
// PROGRESSDB_FAULT_SEED (replays a logged trial).
func configure() error {
	suite.trials = 1
	if v := os.Getenv("PROGRESSDB_FAULT_TRIALS"); v != "" && !testing.Short() {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("PROGRESSDB_FAULT_TRIALS=%q: want a positive number", v)
		}
		suite.long, suite.trials = true, n
	}
	suite.seed = uint64(time.Now().UnixNano())
	if v := os.Getenv("PROGRESSDB_FAULT_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("PROGRESSDB_FAULT_SEED=%q: want a number", v)
		}
		suite.seed = n
	}
	return nil
}

// trialRand returns the random source of trial i of a scenario and logs
// how to replay it: the trial's seed in the same mode.
func trialRand(t testing.TB, i int) *rand.Rand {
	seed := suite.seed + uint64(i)
	replay := fmt.Sprintf("PROGRESSDB_FAULT_SEED=%d", seed)
	if suite.long {
		replay += " PROGRESSDB_FAULT_TRIALS=1"
	}
	test, _, _ := strings.Cut(t.Name(), "/")
	t.Logf("trial %d: seed %d (replay: %s go test -count=1 -run '^%s$' ./server/tests/faults/)", i, seed, replay, test)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// pick returns short in the short mode and long in the long mode.
func pick[T any](short, long T) T {
	if suite.long {
		return long
	}
	return short
}

// envVars is a process environment. Processes get these variables and
// PATH only, never the environment of the test.
type envVars map[string]string

// with returns a copy with the pairs k1, v1, k2, v2… set; an empty value
// removes the variable.
func (e envVars) with(kv ...string) envVars {
	c := make(envVars, len(e)+len(kv)/2)
	for k, v := range e {
		c[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(c, kv[i])
		} else {
			c[kv[i]] = kv[i+1]
		}
	}
	return c
}

func (e envVars) list() []string {
	l := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range e {
		l = append(l, k+"="+v)
	}
	return l
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	// at, when set, is called once the output holds n times the text
	// (lockedBuffer.when).
	at struct {
		text string
		n    int
		fn   func()
	}
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.b.Write(p)
	b.check()
	return n, err
}

// when calls fn, once, as soon as the output holds text n times: from
// the goroutine that copies the process's output, the moment it arrives.
func (b *lockedBuffer) when(text string, n int, fn func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.at.text, b.at.n, b.at.fn = text, n, fn
	b.check()
}

func (b *lockedBuffer) check() {
	if b.at.fn != nil && strings.Count(b.b.String(), b.at.text) >= b.at.n {
		fn := b.at.fn
		b.at.fn = nil
		fn()
	}
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// proc is a progressdb process.
type proc struct {
	args   []string
	cmd    *exec.Cmd
	stdout lockedBuffer
	stderr lockedBuffer
	done   chan struct{} // closed once the process has exited
	code   int           // exit status once done; -1 after a signal
}

// processTimeout bounds every process of the suite.
const processTimeout = 3 * time.Minute

// start starts `progressdb args…` with env. The process is killed when
// the test ends, if it has not exited by then.
func start(t testing.TB, env envVars, args ...string) *proc {
	t.Helper()
	return startCommand(t, env, append([]string{binary}, args...))
}

// startCommand starts argv (the binary, or a wrapper that executes it).
func startCommand(t testing.TB, env envVars, argv []string) *proc {
	t.Helper()
	p, err := launch(env, argv)
	if err != nil {
		t.Fatalf("start %v: %v", argv, err)
	}
	t.Cleanup(p.kill)
	return p
}

// launch starts argv without a test: safe from any goroutine. The caller
// makes sure the process ends.
func launch(env envVars, argv []string) (*proc, error) {
	p := &proc{args: argv, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = env.list()
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		err := p.cmd.Wait()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			p.code = ee.ExitCode()
		case err != nil:
			p.code = -1
		}
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to exit and returns its status; a process
// still running after timeout is killed and fails the test.
func (p *proc) wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	code, ok := p.waitTimeout(timeout)
	if !ok {
		t.Fatalf("%s still running after %s; killed\n%s", p, timeout, p.output())
	}
	return code
}

// waitTimeout waits for the process to exit; after timeout it kills it and
// reports false. Safe from any goroutine.
func (p *proc) waitTimeout(timeout time.Duration) (int, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return p.code, true
	case <-timer.C:
		p.kill()
		return p.code, false
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// killAt sends SIGKILL as soon as the process's stderr holds text n
// times: a step that lasts a few milliseconds is not missed, as it can
// be by a test polling the output. Wait for the process with wait.
func (p *proc) killAt(text string, n int) {
	p.stderr.when(text, n, func() { _ = p.cmd.Process.Signal(syscall.SIGKILL) })
}

// stop asks the process to shut down (SIGTERM) and returns its status.
func (p *proc) stop(t testing.TB) int {
	t.Helper()
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	return p.wait(t, time.Minute)
}

func (p *proc) String() string {
	if p.args[0] == binary {
		return "progressdb " + strings.Join(p.args[1:], " ")
	}
	return strings.Join(p.args, " ")
}

// output is the process's output, for failure messages.
func (p *proc) output() string {
	return fmt.Sprintf("--- stdout of %s\n%s--- stderr\n%s", p, p.stdout.String(), p.stderr.String())
}

// runCLI runs `progressdb args…` to the end and returns it.
func runCLI(t testing.TB, env envVars, args ...string) *proc {
	t.Helper()
	p := start(t, env, args...)
	p.wait(t, processTimeout)
	return p
}

// runRetention runs `progressdb retention run --json` to the end and
// returns its exit status and, when it printed one, its summary.
func runRetention(t testing.TB, env envVars, extra ...string) (*proc, *retention.Result) {
	t.Helper()
	p := runCLI(t, env, append([]string{"retention", "run", "--json"}, extra...)...)
	return p, parseResult(p)
}

// startRetention starts `progressdb retention run --json` without waiting.
func startRetention(t testing.TB, env envVars) *proc {
	t.Helper()
	return start(t, env, "retention", "run", "--json")
}

// parseResult decodes the summary a `retention run --json` printed, if any.
func parseResult(p *proc) *retention.Result {
	var res retention.Result
	if err := json.Unmarshal([]byte(p.stdout.String()), &res); err != nil || res.RunID == "" {
		return nil
	}
	return &res
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		case <-tick.C:
		}
	}
}

// sleepUntil waits for an instant: retention decides by the clock, and a
// deletion falls due only once its period has passed.
func sleepUntil(at time.Time) {
	time.Sleep(time.Until(at))
}

// findings reports failures of one kind: the first few, then a count, so
// that a broken invariant does not print a line per key.
type findings struct {
	t testing.TB
	n int
}

const maxFindings = 20

func (f *findings) errorf(format string, args ...any) {
	f.t.Helper()
	if f.n++; f.n <= maxFindings {
		f.t.Errorf(format, args...)
	}
}

func (f *findings) close() {
	f.t.Helper()
	if f.n > maxFindings {
		f.t.Errorf("… and %d more failures like these", f.n-maxFindings)
	}
}
