// Command progressdb-bench measures the retention subsystem side by side
// with a naive purge and with Pebble's own limit, and (B9) the HTTP write
// path and thread listing side by side with raw Pebble synced commits, on
// data it seeds itself in temporary directories, and writes the figures to
// BENCHMARKS.md.
//
// Every figure is the median of several repetitions, and every target is a
// ratio of figures measured in the same run, so the results hold on any
// machine that is quiet enough. Each repetition starts from an identical
// copy of the scenario's seeded database (a Pebble checkpoint).
//
//	go run ./server/cmd/progressdb-bench -out BENCHMARKS.md [-scale 1] [-reps N] [-only B1,B3] [-benchout FILE]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command-line flags.
type options struct {
	scale      float64
	reps       int
	only       map[string]bool
	out        string
	tmp        string
	keep       bool
	cpuprofile string
	profile    string
	benchout   string
	args       []string
	// B12: the trail sizes, and the binaries to serve them (default: this
	// checkout, built).
	trailSizes []int
	servers    []b12Server
}

// b12Server is one binary B12 measures (-servers): its name in the tables
// and its path. It is declared beside the options that parse it, so that
// the harness builds without B12's file (bench-compare leaves out the
// scenario files a base revision cannot build).
type b12Server struct{ name, path string }

func main() {
	if os.Getenv(loadgenEnv) != "" {
		os.Exit(runLoadgen(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	if os.Getenv(b15ClientEnv) != "" {
		os.Exit(runB15Client(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "progressdb-bench:", err)
		return 2
	}
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			fmt.Fprintln(stderr, "progressdb-bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "progressdb-bench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}

	b, err := newBench(o, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "progressdb-bench:", err)
		return 1
	}
	defer b.cleanup()
	if o.benchout != "" {
		if err := b.openBenchOut(o.benchout); err != nil {
			fmt.Fprintln(stderr, "progressdb-bench:", err)
			return 1
		}
	}

	rep := &report{
		command: commandLine(o.args),
		machine: describeMachine(),
		scale:   o.scale,
		started: time.Now().UTC(),
	}
	failed := false
	for _, sc := range scenarios {
		if len(o.only) > 0 && !o.only[sc.id] {
			continue
		}
		b.logf("%s: %s", sc.id, sc.title)
		start, load := time.Now(), loadAverage()
		sec, err := sc.run(ctx, b)
		if sec == nil {
			sec = &section{}
		}
		sec.id, sec.title, sec.load = sc.id, sc.title, load
		sec.elapsed = time.Since(start)
		if err != nil {
			failed = true
			sec.err = err.Error()
			b.logf("%s: error: %v", sc.id, err)
		} else {
			b.logf("%s: done in %s", sc.id, sec.elapsed.Round(100*time.Millisecond))
		}
		rep.sections = append(rep.sections, sec)
		if ctx.Err() != nil {
			break
		}
	}
	rep.finished = time.Now().UTC()
	rep.loadEnd = loadAverage()

	fmt.Fprint(stdout, rep.console())
	if o.out != "" && o.out != "-" {
		md := rep.markdown()
		// A run of some scenarios updates their sections of an existing
		// report instead of leaving it with theirs alone.
		if old, err := os.ReadFile(o.out); err == nil && len(o.only) > 0 {
			md = rep.merge(string(old))
		}
		if err := os.WriteFile(o.out, []byte(md), 0o644); err != nil {
			fmt.Fprintln(stderr, "progressdb-bench:", err)
			return 1
		}
		b.logf("wrote %s", o.out)
	}
	if failed || ctx.Err() != nil {
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("progressdb-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var only string
	fs.Float64Var(&o.scale, "scale", 1, "size multiplier (1: about five minutes on two cores)")
	fs.IntVar(&o.reps, "reps", 0, "repetitions per measurement (0: each scenario's default, 3 to 9)")
	fs.StringVar(&only, "only", "", "comma-separated scenarios to run, e.g. B1,B3 (default: all); their sections replace those in an existing -out file")
	fs.StringVar(&o.out, "out", "BENCHMARKS.md", "markdown report to write (\"-\": none)")
	fs.StringVar(&o.tmp, "tmp", "", "directory for the temporary databases (default: the system temp dir)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary databases")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&o.profile, "profile", "", "B9 (one thread) and B14: write CPU, heap allocation, mutex and block profiles of every timed cell into this directory (B9: an execution trace too)")
	fs.StringVar(&o.benchout, "benchout", "", "append every repetition's figures to this file in Go benchmark format (for benchstat; B9 and B14)")
	var sizes, servers string
	fs.StringVar(&sizes, "trail-sizes", "", "B12: comma-separated numbers of sealed audit files (default 100,10000; the targets compare the last with the first)")
	fs.StringVar(&servers, "servers", "", "B12: comma-separated NAME=PATH of progressdb binaries to measure side by side (default: this checkout, built)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: progressdb-bench [flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.scale <= 0 {
		return o, fmt.Errorf("-scale must be positive, got %v", o.scale)
	}
	if o.profile != "" && o.cpuprofile != "" {
		return o, errors.New("-profile and -cpuprofile cannot be used together (one CPU profile at a time)")
	}
	if o.reps < 0 {
		return o, fmt.Errorf("-reps must not be negative, got %d", o.reps)
	}
	for _, f := range strings.Split(sizes, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return o, fmt.Errorf("-trail-sizes: %q is not a positive number", f)
		}
		o.trailSizes = append(o.trailSizes, n)
	}
	for _, f := range strings.Split(servers, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		name, path, ok := strings.Cut(f, "=")
		if !ok || name == "" || path == "" {
			return o, fmt.Errorf("-servers: %q is not NAME=PATH", f)
		}
		o.servers = append(o.servers, b12Server{name: name, path: path})
	}
	known := map[string]bool{}
	for _, sc := range scenarios {
		known[sc.id] = true
	}
	if only != "" {
		o.only = map[string]bool{}
		for _, id := range strings.Split(only, ",") {
			id = strings.ToUpper(strings.TrimSpace(id))
			if id == "" {
				continue
			}
			if !known[id] {
				return o, fmt.Errorf("-only: unknown scenario %q", id)
			}
			o.only[id] = true
		}
	}
	o.args = args
	return o, nil
}

// commandLine renders the command that reproduces this run.
func commandLine(args []string) string {
	parts := []string{"go run ./server/cmd/progressdb-bench"}
	for _, a := range args {
		if strings.ContainsAny(a, " \t'\"$") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// scenario is one benchmark of the issues (B1..B16).
type scenario struct {
	id, title string
	run       func(ctx context.Context, b *bench) (*section, error)
}

var scenarios = []scenario{
	{"B1", "purge throughput", runB1},
	{"B2", "discovery cost", runB2},
	{"B3", "memory", runB3},
	{"B4", "foreground impact", runB4},
	{"B5", "disk space", runB5},
	{"B6", "erasure cost", runB6},
	{"B7", "retention policies", runB7},
	{"B8", "export before purge", runB8},
	{"B9", "HTTP write throughput and thread listing", runB9},
	{"B10", "backup and restore with purge replay", runB10},
	{"B11", "cluster: 1 node vs 3, forwarding, purge over shards", runB11},
	{"B12", "an audit trail of any age", runB12},
	{"B13", "sealed content: write CPU, shredding purge, writers", runB13},
	{"B13E", "subject erasure: the author's threads, not the database", runB13E},
	{"B14", "CPU per request: HTTP, store and raw Pebble", runB14},
	{"B15", "attachments: streamed throughput, sealed CPU, purge", runB15},
	{"B16", "replicated shards: writes with 3 replicas vs 1, failover", runB16},
}
