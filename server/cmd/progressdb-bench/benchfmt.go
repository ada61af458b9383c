package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// benchMetric is one value of a Go benchmark format line, e.g. {123.4, "cpu-us/op"}.
type benchMetric struct {
	v    float64
	unit string
}

// openBenchOut opens path for appending Go benchmark format lines, which
// benchstat reads (make bench-compare); the configuration lines name the
// machine, so that files of two builds compare.
func (b *bench) openBenchOut(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	m := describeMachine()
	fmt.Fprintf(f, "goos: %s\ngoarch: %s\npkg: progressdb-bench\ncpu: %s\n", runtime.GOOS, runtime.GOARCH, m.cpuModel)
	b.benchOut = f
	return nil
}

// goBench writes one repetition's figures as a Go benchmark line:
// "BenchmarkB14/append/clients=1/api 1234 250.1 cpu-us/op 4000 req/s".
// Nothing is written without -benchout.
func (b *bench) goBench(name string, n int64, ms ...benchMetric) {
	if b.benchOut == nil {
		return
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "Benchmark%s \t%d", strings.ReplaceAll(name, " ", "_"), max(n, 1))
	for _, m := range ms {
		fmt.Fprintf(&sb, "\t%.6g %s", m.v, m.unit)
	}
	sb.WriteByte('\n')
	b.mu.Lock()
	defer b.mu.Unlock()
	_, _ = b.benchOut.WriteString(sb.String())
}
