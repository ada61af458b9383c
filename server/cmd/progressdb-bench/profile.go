package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
)

// cellProfile writes the profiles of one timed cell (-profile DIR): a CPU
// profile over the timed loop, and the heap allocation profile at its start
// and end, so that `go tool pprof -sample_index=alloc_space -diff_base
// NAME.allocs-start.pprof NAME.allocs.pprof` shows what the cell
// allocated. The mutex and block profiles are written the same way (where
// writers wait: a stripe, the commit pipeline, a sync), and with trace set
// an execution trace of the loop too (NAME.trace: `go tool trace`). A nil
// cellProfile does nothing.
type cellProfile struct {
	dir, name string
	trace     bool
	cpu, tr   *os.File
}

// profile returns the profile of the cell name, or nil without -profile.
func (b *bench) profile(name string) *cellProfile {
	if b.o.profile == "" {
		return nil
	}
	return &cellProfile{dir: b.o.profile, name: name}
}

func (p *cellProfile) path(suffix string) string {
	return filepath.Join(p.dir, p.name+suffix)
}

func (p *cellProfile) start() error {
	if p == nil {
		return nil
	}
	if err := os.MkdirAll(p.dir, 0o750); err != nil {
		return err
	}
	if err := writeAllocs(p.path(".allocs-start.pprof")); err != nil {
		return err
	}
	// Every contention event and every blocking of 10 µs or more: the
	// waits are what the profile is for, not their cost.
	runtime.SetMutexProfileFraction(1)
	runtime.SetBlockProfileRate(10_000)
	if err := writeWaits(p.path, "-start"); err != nil {
		return err
	}
	if p.trace {
		tf, err := os.Create(p.path(".trace"))
		if err != nil {
			return err
		}
		if err := trace.Start(tf); err != nil {
			_ = tf.Close()
			return fmt.Errorf("trace %s: %w", p.name, err)
		}
		p.tr = tf
	}
	f, err := os.Create(p.path(".cpu.pprof"))
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("profile %s: %w", p.name, err)
	}
	p.cpu = f
	return nil
}

func (p *cellProfile) stop() error {
	if p == nil || p.cpu == nil {
		return nil
	}
	pprof.StopCPUProfile()
	err := p.cpu.Close()
	p.cpu = nil
	if p.tr != nil {
		trace.Stop()
		err = errors.Join(err, p.tr.Close())
		p.tr = nil
	}
	err = errors.Join(err, writeWaits(p.path, ""))
	runtime.SetMutexProfileFraction(0)
	runtime.SetBlockProfileRate(0)
	return errors.Join(err, writeAllocs(p.path(".allocs.pprof")))
}

// writeWaits writes the mutex and block profiles (cumulative since the
// rates were set: a cell's own waits are the difference of its end and
// its start, -diff_base).
func writeWaits(path func(string) string, suffix string) error {
	var errs []error
	for _, name := range []string{"mutex", "block"} {
		f, err := os.Create(path("." + name + suffix + ".pprof"))
		if err != nil {
			return err
		}
		errs = append(errs, pprof.Lookup(name).WriteTo(f, 0), f.Close())
	}
	return errors.Join(errs...)
}

// writeAllocs writes the heap profile after a collection, since it shows
// the state as of the last one.
func writeAllocs(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
}
