package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// line is one line of output and the test that wrote it ("" for the
// package itself).
type line struct {
	test string
	text string
}

// group is a top-level test and its subtests while they run: their output
// is kept until the test ends, and printed only if it failed.
type group struct {
	resumed time.Time // when the test last started or continued
	tests   []string  // the test and its subtests in start order
	lines   []line
	failed  map[string]bool
}

// pkg is the state of one package while its tests run.
type pkg struct {
	groups map[string]*group // running top-level tests by name
	order  []string          // their names in start order
	lines  []string          // the package's own output
}

// timing is how long one top-level test took.
type timing struct {
	pkg, test string
	elapsed   float64
}

// report turns the events into what plain go test prints.
type report struct {
	w       io.Writer
	pkgs    map[string]*pkg
	timings []timing
	failed  bool // a package or a build failed
}

func newReport(w io.Writer) *report {
	return &report{w: w, pkgs: make(map[string]*pkg)}
}

// read handles events until r ends. A line that is not an event (go test
// writes some of its own, e.g. when it cannot start) is printed as is.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(r.w, sc.Text())
			continue
		}
		r.handle(e)
	}
	return sc.Err()
}

func (r *report) pkg(name string) *pkg {
	p := r.pkgs[name]
	if p == nil {
		p = &pkg{groups: make(map[string]*group)}
		r.pkgs[name] = p
	}
	return p
}

func (r *report) handle(e event) {
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.w, e.Output)
		return
	case "build-fail":
		r.failed = true
		return
	}
	if e.Package == "" {
		return
	}
	p := r.pkg(e.Package)
	if e.Test == "" {
		r.packageEvent(e, p)
		return
	}
	top, _, _ := strings.Cut(e.Test, "/")
	g := p.groups[top]
	switch {
	case e.Action == "run" && e.Test == top:
		g = &group{failed: make(map[string]bool)}
		p.groups[top] = g
		p.order = append(p.order, top)
	case g == nil:
		return
	}
	switch e.Action {
	case "run":
		g.tests = append(g.tests, e.Test)
		if e.Test == top {
			g.resumed = e.Time
		}
	case "cont":
		if e.Test == top {
			g.resumed = e.Time
		}
	case "output":
		if !isProgress(e.Output) {
			g.lines = append(g.lines, line{e.Test, e.Output})
		}
	case "fail":
		g.failed[e.Test] = true
	}
	if e.Test != top || e.Action != "pass" && e.Action != "fail" && e.Action != "skip" {
		return
	}
	if e.Action != "skip" {
		// A test whose subtests run in parallel reports only its own
		// body's time; its subtests' is the time until it ended.
		elapsed := e.Elapsed
		if !g.resumed.IsZero() && !e.Time.IsZero() {
			elapsed = max(elapsed, e.Time.Sub(g.resumed).Seconds())
		}
		r.timings = append(r.timings, timing{e.Package, e.Test, elapsed})
	}
	if e.Action == "fail" {
		g.printFailed(r.w)
	}
	p.end(top)
}

// printFailed prints the output of the group's failed tests as plain go
// test does: each test's result line first, then what it logged, a
// subtest indented below its parent.
func (g *group) printFailed(w io.Writer) {
	for _, name := range g.tests {
		if !g.failed[name] {
			continue
		}
		indent := strings.Repeat("    ", strings.Count(name, "/"))
		result := "--- FAIL: " + name + " "
		var logged []string
		for _, l := range g.lines {
			switch {
			case l.test != name:
			case strings.HasPrefix(strings.TrimLeft(l.text, " "), result):
				fmt.Fprint(w, indent+strings.TrimLeft(l.text, " "))
			default:
				logged = append(logged, l.text)
			}
		}
		for _, l := range logged {
			fmt.Fprint(w, indent+l)
		}
	}
}

// packageEvent handles an event of the package itself: its output, kept
// until the package ends, and its end.
func (r *report) packageEvent(e event, p *pkg) {
	switch e.Action {
	case "output":
		if !isProgress(e.Output) {
			p.lines = append(p.lines, e.Output)
		}
		return
	case "pass", "skip":
		// A passing package prints its summary line only.
		for _, l := range p.lines {
			if strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "?") {
				fmt.Fprint(r.w, l)
			}
		}
	case "fail":
		r.failed = true
		// Tests still running when the package failed (a panic, a
		// timeout) print everything they wrote: the cause is in there.
		for _, name := range p.order {
			if g := p.groups[name]; g != nil {
				for _, l := range g.lines {
					fmt.Fprint(r.w, l.text)
				}
			}
		}
		for _, l := range p.lines {
			fmt.Fprint(r.w, l)
		}
	default:
		return
	}
	delete(r.pkgs, e.Package)
}

// end forgets a top-level test that finished.
func (p *pkg) end(top string) {
	delete(p.groups, top)
	for i, name := range p.order {
		if name == top {
			p.order = append(p.order[:i], p.order[i+1:]...)
			break
		}
	}
}

// isProgress reports whether s is one of the lines that only go test -v
// prints: a test starting, pausing, continuing or being named again.
func isProgress(s string) bool {
	s = strings.TrimLeft(s, " ")
	for _, p := range []string{"=== RUN ", "=== PAUSE ", "=== CONT ", "=== NAME "} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// finish prints the n slowest top-level tests of the run.
func (r *report) finish(n int) {
	if n == 0 || len(r.timings) == 0 {
		return
	}
	sort.SliceStable(r.timings, func(i, j int) bool { return r.timings[i].elapsed > r.timings[j].elapsed })
	n = min(n, len(r.timings))
	fmt.Fprintf(r.w, "\nslowest %d tests:\n", n)
	for _, t := range r.timings[:n] {
		d := time.Duration(t.elapsed * float64(time.Second)).Round(10 * time.Millisecond)
		fmt.Fprintf(r.w, "%9s  %s  %s\n", d, t.test, t.pkg)
	}
}
