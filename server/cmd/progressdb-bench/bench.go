package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// bench holds what every scenario shares: options, the temporary root and
// the progress log.
type bench struct {
	o     options
	root  string
	start time.Time

	mu       sync.Mutex
	log      io.Writer
	benchOut *os.File // -benchout, nil without
}

func newBench(o options, log io.Writer) (*bench, error) {
	root, err := os.MkdirTemp(o.tmp, "progressdb-bench-")
	if err != nil {
		return nil, err
	}
	return &bench{o: o, root: root, start: time.Now(), log: log}, nil
}

func (b *bench) cleanup() {
	if b.benchOut != nil {
		_ = b.benchOut.Close()
	}
	if b.o.keep {
		b.logf("kept the temporary databases in %s", b.root)
		return
	}
	_ = os.RemoveAll(b.root)
}

// logf writes one progress line to stderr, prefixed with the time elapsed.
func (b *bench) logf(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	el := time.Since(b.start).Round(100 * time.Millisecond)
	fmt.Fprintf(b.log, "[%7s] %s\n", el, fmt.Sprintf(format, args...))
}

// scaled multiplies a size by -scale, never below min.
func (b *bench) scaled(n, min int) int {
	v := int(math.Round(float64(n) * b.o.scale))
	if v < min {
		return min
	}
	return v
}

// reps is the number of repetitions of a measurement: -reps when given,
// otherwise def (5 where cheap, 3 otherwise).
func (b *bench) reps(def int) int {
	if b.o.reps > 0 {
		return b.o.reps
	}
	return def
}

// dir returns a fresh directory path under the temporary root (not created).
func (b *bench) dir(parts ...string) string {
	return filepath.Join(append([]string{b.root}, parts...)...)
}

// seeded is a scenario's seeded database, kept open so that every variant
// and repetition can start from a checkpoint of it.
type seeded struct {
	dir string
	st  *store.Store
	n   int // checkpoints taken, for unique names
}

func openSeeded(dir string) (*seeded, error) {
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", filepath.Base(dir), err)
	}
	return &seeded{dir: dir, st: st}, nil
}

func (s *seeded) db() *pebble.DB { return s.st.DB() }

// settle flushes the memtable and compacts the whole keyspace, so the
// seeded data sits in sstables as old data does, and every checkpoint of it
// starts from the same shape.
func (s *seeded) settle(ctx context.Context) error {
	if err := s.db().Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if err := s.db().Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	return nil
}

func (s *seeded) close() error {
	if s == nil || s.st == nil {
		return nil
	}
	err := s.st.Close()
	s.st = nil
	return err
}

// fork is one repetition's private copy of a seeded database.
type fork struct {
	root string // holds db/ and audit/
	st   *store.Store
}

func (f *fork) dbDir() string     { return filepath.Join(f.root, "db") }
func (f *fork) auditDir() string  { return filepath.Join(f.root, "audit") }
func (f *fork) exportDir() string { return filepath.Join(f.root, "exports") }
func (f *fork) db() *pebble.DB    { return f.st.DB() }

// fork checkpoints the seeded database into a new directory and opens the
// copy with the store.
func (s *seeded) fork(name string) (*fork, error) {
	s.n++
	f := &fork{root: fmt.Sprintf("%s-%s-%d", s.dir, name, s.n)}
	if err := os.MkdirAll(f.root, 0o750); err != nil {
		return nil, err
	}
	if err := s.db().Checkpoint(f.dbDir(), pebble.WithFlushedWAL()); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	st, err := store.Open(f.dbDir(), store.Options{})
	if err != nil {
		_ = os.RemoveAll(f.root)
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	f.st = st
	return f, nil
}

// close closes the copy and removes it.
func (f *fork) close() error {
	if f == nil {
		return nil
	}
	var err error
	if f.st != nil {
		err = f.st.Close()
		f.st = nil
	}
	if rmErr := os.RemoveAll(f.root); err == nil {
		err = rmErr
	}
	return err
}

// copyAs checkpoints the seeded database into dir and opens the copy as a
// seeded database of its own.
func (s *seeded) copyAs(dir string) (*seeded, error) {
	if err := s.db().Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return openSeeded(dir)
}

// tableCount is the number of live sstables.
func tableCount(db *pebble.DB) float64 { return sizeOf(db).files }
