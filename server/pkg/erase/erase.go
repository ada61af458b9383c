// Package erase makes key ranges deleted from a Pebble database
// unrecoverable from every file of its directory (docs/erasure.md). A
// delete only writes a tombstone: the value it removes stays in SSTables
// until a compaction holds both, in the memtable and its WAL until a
// flush, and in obsolete WAL files that Pebble keeps for reuse. Run
// flushes, compacts the ranges to the bottom level (where tombstones and
// shadowed values are dropped), rotates the WAL until no log file older
// than the erase is left, and waits until every table the compactions
// replaced is really deleted.
//
// The data store and the key store both erase through Run; each keeps its
// own record of what is owed. A database erased here must be opened on
// NoRecycleFS, and every key in it must be printable ASCII (Run marks
// tables with keys that cannot exist: a table's smallest key followed by a
// zero byte).
package erase

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrIncomplete means files holding deleted content were still on disk
// when Run gave up waiting for them.
var ErrIncomplete = errors.New("erase incomplete")

const (
	// GapMerge: two spans are compacted as one when the data between them
	// is smaller than this. One compaction per span would rewrite the same
	// tables again and again.
	GapMerge = 8 << 20
	// poll is how often Run looks for files it waits on.
	poll = 5 * time.Millisecond
	// DefaultWait bounds the wait for open snapshots and iterators that
	// pin deleted data; a reader holding one longer fails the erase.
	DefaultWait = 30 * time.Second
)

// Span is a key range [Start, End).
type Span struct{ Start, End []byte }

// Options configure Run.
type Options struct {
	// Rate bounds the bottom-level table bytes rewritten per second (0:
	// unbounded). A range is compacted one bottom-level table at a time,
	// with a pause after each that keeps the average at Rate, so that user
	// writes are not starved of disk and CPU by a long erase.
	Rate int64
	// Wait bounds each wait for readers and files (DefaultWait when zero).
	Wait time.Duration
	// Progress, when set, is told of each step as it begins, and of each
	// key range compacted: an erase can take minutes on a large database.
	Progress func(Progress)
	// Held, when set, reports whether something beside the database
	// still holds content from before the deletes under dir (a backup's
	// staging checkpoint: a copied log, links to replaced tables). Run
	// waits for it to end, as for snapshots, before it reports success.
	Held func() bool
}

// Progress is where an erase is: its step (one of the steps below) and,
// while compacting, the key ranges done of Total.
type Progress struct {
	Step  string `json:"step"`
	Done  int    `json:"done"`
	Total int    `json:"total"`
}

// The steps of an erase, in order.
const (
	WaitReaders = "waiting for readers"
	Compact     = "compacting"
	RotateLogs  = "rotating logs"
	RemoveFiles = "removing old files"
)

// Result describes what Run did.
type Result struct {
	// Ranges is the number of key ranges compacted.
	Ranges int
	// TablesRemoved and LogsRemoved count the files present before the
	// erase that it saw deleted.
	TablesRemoved, LogsRemoved int
}

// Run makes the content deleted in ranges unrecoverable from every file of
// db, whose directory is dir. Live data is untouched: compactions rewrite
// it as is. Pass ranges through Merge first when there are many.
func Run(ctx context.Context, db *pebble.DB, dir string, ranges []Span, opts Options) (Result, error) {
	res := Result{Ranges: len(ranges)}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	e := eraser{db: db, dir: dir, wait: opts.Wait}
	if e.wait <= 0 {
		e.wait = DefaultWait
	}
	step := func(name string, done int) {
		if opts.Progress != nil {
			opts.Progress(Progress{Step: name, Done: done, Total: len(ranges)})
		}
	}
	before, err := e.files()
	if err != nil {
		return res, err
	}
	step(WaitReaders, 0)
	// A snapshot older than the deletes makes compactions keep the values
	// it can see. Snapshots opened later see the deletes and pin nothing.
	if err := e.waitNoSnapshots(ctx); err != nil {
		return res, err
	}
	if err := e.markBottomTables(ranges); err != nil {
		return res, err
	}
	if err := db.Flush(); err != nil {
		return res, fmt.Errorf("flush: %w", err)
	}
	for i, r := range ranges {
		step(Compact, i)
		if err := e.compactPaced(ctx, r, opts.Rate); err != nil {
			return res, fmt.Errorf("compact %s: %w", r.Start, err)
		}
	}
	step(RotateLogs, len(ranges))
	logs, err := e.rotateLogs(ctx, before)
	res.LogsRemoved = logs
	if err != nil {
		return res, err
	}
	step(RemoveFiles, len(ranges))
	tables, err := e.waitTablesGone(ctx, before)
	res.TablesRemoved = tables
	if err != nil || opts.Held == nil {
		return res, err
	}
	return res, e.poll(ctx, func() (bool, error) { return !opts.Held(), nil },
		"a copy of the database from before the deletes (a backup's staging checkpoint) in its folder")
}

type eraser struct {
	db   *pebble.DB
	dir  string
	wait time.Duration
}

// markBottomTables deletes, for every bottom-level table overlapping
// ranges, a key that cannot exist (the table's smallest key followed by a
// zero byte; keys are printable). DB.Compact only compacts a level into the
// next, so a bottom-level table with nothing above it in the range would be
// left as it is, and with it any value a snapshot pinned beside its
// tombstone when an earlier compaction brought both there. The tombstones
// put every such table under a compaction from above; they are dropped at
// the bottom level.
func (e eraser) markBottomTables(ranges []Span) error {
	levels, err := e.db.SSTables()
	if err != nil {
		return fmt.Errorf("list tables: %w", err)
	}
	b := e.db.NewBatch()
	defer b.Close()
	for _, t := range levels[len(levels)-1] {
		for _, r := range ranges {
			if bytes.Compare(t.Largest.UserKey, r.Start) >= 0 && bytes.Compare(t.Smallest.UserKey, r.End) < 0 {
				_ = b.Delete(append(bytes.Clone(t.Smallest.UserKey), 0), nil)
				break
			}
		}
	}
	if b.Empty() {
		return nil
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("mark tables: %w", err)
	}
	return nil
}

// compactPaced compacts r down to the bottom level in pieces, one per
// bottom-level table it overlaps (the pieces cover r without gaps, so data
// in upper levels between tables is compacted too), pausing after each
// piece to keep to rate bytes per second.
func (e eraser) compactPaced(ctx context.Context, r Span, rate int64) error {
	if rate <= 0 {
		return e.db.Compact(ctx, r.Start, r.End, false)
	}
	levels, err := e.db.SSTables()
	if err != nil {
		return fmt.Errorf("list tables: %w", err)
	}
	type piece struct {
		end  []byte
		size uint64
	}
	var pieces []piece
	for _, t := range levels[len(levels)-1] {
		lo, hi := t.Smallest.UserKey, t.Largest.UserKey
		if bytes.Compare(hi, r.Start) <= 0 || bytes.Compare(lo, r.End) >= 0 {
			continue
		}
		if bytes.Compare(hi, r.End) >= 0 {
			break
		}
		pieces = append(pieces, piece{end: bytes.Clone(hi), size: t.Size})
	}
	pieces = append(pieces, piece{end: r.End})
	start := r.Start
	for _, p := range pieces {
		if bytes.Compare(start, p.end) >= 0 {
			continue
		}
		began := time.Now()
		if err := e.db.Compact(ctx, start, p.end, false); err != nil {
			return err
		}
		start = p.end
		wait := time.Duration(float64(p.size)/float64(rate)*float64(time.Second)) - time.Since(began)
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
	return nil
}

// Merge sorts spans and joins neighbours with less than gap bytes of data
// between them. The data between two spans is taken from the tables'
// metadata alone: EstimateDiskUsage would read blocks of every table a gap
// cuts, once per gap, which cost more than the compactions on a cold start.
func Merge(db *pebble.DB, spans []Span, gap uint64) []Span {
	if len(spans) == 0 {
		return nil
	}
	between, err := tableBytes(db)
	if err != nil {
		// Spans compacted one by one are as erased, only slower.
		between = func(a, b []byte) uint64 { return gap }
	}
	in := slices.Clone(spans)
	slices.SortFunc(in, func(a, b Span) int { return bytes.Compare(a.Start, b.Start) })
	out := []Span{in[0]}
	for _, sp := range in[1:] {
		last := &out[len(out)-1]
		if bytes.Compare(sp.Start, last.End) <= 0 || between(last.End, sp.Start) < gap {
			if bytes.Compare(sp.End, last.End) > 0 {
				last.End = sp.End
			}
			continue
		}
		out = append(out, sp)
	}
	return out
}

// tableBytes returns a function that sums the sizes of the tables lying
// wholly in [a, b), from the LSM's metadata (no block is read). Tables of
// levels below L0 do not overlap within their level, so each level is
// searched in O(log tables).
func tableBytes(db *pebble.DB) (func(a, b []byte) uint64, error) {
	levels, err := db.SSTables()
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	type table struct {
		lo, hi []byte
		cum    uint64 // sizes of this level's tables up to this one
	}
	sorted := make([][]table, len(levels))
	for l, infos := range levels {
		var cum uint64
		for _, t := range infos {
			cum += t.Size
			sorted[l] = append(sorted[l], table{t.Smallest.UserKey, t.Largest.UserKey, cum})
		}
	}
	return func(a, b []byte) uint64 {
		var n uint64
		for l, lvl := range sorted {
			if l == 0 {
				var prev uint64
				for _, t := range lvl {
					if bytes.Compare(t.lo, a) >= 0 && bytes.Compare(t.hi, b) < 0 {
						n += t.cum - prev
					}
					prev = t.cum
				}
				continue
			}
			i := sort.Search(len(lvl), func(i int) bool { return bytes.Compare(lvl[i].lo, a) >= 0 })
			j := sort.Search(len(lvl), func(i int) bool { return bytes.Compare(lvl[i].hi, b) >= 0 })
			if j > i {
				n += lvl[j-1].cum
				if i > 0 {
					n -= lvl[i-1].cum
				}
			}
		}
		return n
	}, nil
}

// dbFiles are the names of the tables and logs in the directory.
type dbFiles struct{ tables, logs map[string]bool }

func (e eraser) files() (dbFiles, error) {
	f := dbFiles{tables: map[string]bool{}, logs: map[string]bool{}}
	entries, err := os.ReadDir(e.dir)
	if err != nil {
		return f, fmt.Errorf("list %s: %w", e.dir, err)
	}
	for _, ent := range entries {
		switch filepath.Ext(ent.Name()) {
		case ".sst", ".blob":
			f.tables[ent.Name()] = true
		case ".log":
			f.logs[ent.Name()] = true
		}
	}
	return f, nil
}

// waitNoSnapshots waits for a moment with no open snapshot.
func (e eraser) waitNoSnapshots(ctx context.Context) error {
	return e.poll(ctx, func() (bool, error) {
		return e.db.Metrics().Snapshots.Count == 0, nil
	}, "snapshots still open")
}

// rotateLogs starts new WAL files until none of the logs in before is left.
// Each forced flush starts a fresh log (NoRecycleFS never reuses one with
// an old tail) and retires the previous one; Pebble keeps a few retired
// logs for reuse, so it takes up to that many rotations to consume them all.
func (e eraser) rotateLogs(ctx context.Context, before dbFiles) (int, error) {
	removed := 0
	rotations := 0
	err := e.poll(ctx, func() (bool, error) {
		now, err := e.files()
		if err != nil {
			return false, err
		}
		left := 0
		for name := range before.logs {
			if now.logs[name] {
				left++
			}
		}
		removed = len(before.logs) - left
		if left == 0 {
			return true, nil
		}
		if rotations < maxLogRotations {
			rotations++
			if err := e.db.Flush(); err != nil {
				return false, fmt.Errorf("flush: %w", err)
			}
		}
		return false, nil
	}, "log files from before the erase still present")
	return removed, err
}

// maxLogRotations is more than the logs Pebble keeps for reuse
// (MemTableStopWritesThreshold+1) plus the one in use.
const maxLogRotations = 8

// waitTablesGone waits until every table from before that is no longer part
// of the database has been deleted: obsolete tables are removed in the
// background, and later still while an open iterator uses them.
func (e eraser) waitTablesGone(ctx context.Context, before dbFiles) (int, error) {
	removed := 0
	err := e.poll(ctx, func() (bool, error) {
		live, err := e.liveTables()
		if err != nil {
			return false, err
		}
		now, err := e.files()
		if err != nil {
			return false, err
		}
		removed = 0
		waiting := 0
		for name := range before.tables {
			switch {
			case !now.tables[name]:
				removed++
			case !live[name]:
				waiting++
			}
		}
		return waiting == 0, nil
	}, "replaced tables still present (an open iterator holds them)")
	return removed, err
}

// liveTables names the tables of the current version.
func (e eraser) liveTables() (map[string]bool, error) {
	levels, err := e.db.SSTables()
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	live := map[string]bool{}
	for _, level := range levels {
		for _, t := range level {
			live[t.BackingSSTNum.String()+".sst"] = true
		}
	}
	return live, nil
}

// poll calls done until it reports true, an error, the context ends or
// the wait passes (ErrIncomplete, with what).
func (e eraser) poll(ctx context.Context, done func() (bool, error), what string) error {
	deadline := time.Now().Add(e.wait)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s after %s", ErrIncomplete, what, e.wait)
		}
		t.Reset(poll)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// NoRecycleFS never reuses an old WAL file: ReuseForWrite (whose contract
// allows it) removes the old file and creates the new one, so no log keeps
// records of an earlier log in its tail.
type NoRecycleFS struct{ vfs.FS }

func (fs NoRecycleFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.Remove(oldname); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	return fs.Create(newname, category)
}
