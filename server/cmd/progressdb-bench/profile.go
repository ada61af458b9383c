package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
)

// cellProfile writes the profiles of one timed cell (-profile DIR): a CPU
// profile over the timed loop, and the heap allocation profile at its start
// and end, so that `go tool pprof -sample_index=alloc_space -diff_base
// NAME.allocs-start.pprof NAME.allocs.pprof` shows what the cell
// allocated. A nil cellProfile does nothing.
type cellProfile struct {
	dir, name string
	cpu       *os.File
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
	return errors.Join(err, writeAllocs(p.path(".allocs.pprof")))
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
