package store

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

// Physical erasure (docs/erasure.md). A purge only writes tombstones: the
// values it removes stay in SSTables until a compaction holds both, in the
// memtable and its WAL until a flush, and in obsolete WAL files that Pebble
// keeps for reuse. Erase flushes, compacts the purged key ranges to the
// bottom level (where tombstones and shadowed values are dropped), rotates
// the WAL until no log file older than the erase is left, and waits until
// every table the compactions replaced is really deleted.

// eraseKey records that everything purged so far has been erased. It is
// removed (OweErase) before a purge's first delete and written back by a
// successful Erase: a database where it is missing (written by an earlier
// version, or a run that crashed, failed to erase, or ran with erasure off)
// gets a full erase of its whole key space once.
const eraseKey = "sys:erased"

// ErrEraseIncomplete means files holding purged content were still on disk
// when Erase gave up waiting for them.
var ErrEraseIncomplete = errors.New("erase incomplete")

const (
	// maxEraseSpans bounds the spans an EraseSpans keeps one by one; past
	// it, each namespace collapses into one span from its lowest to its
	// highest key, which costs a larger compaction but no more memory.
	maxEraseSpans = 1 << 16
	// eraseGapMerge: two purged spans are compacted as one when the data
	// between them is smaller than this. One compaction per span would
	// rewrite the same tables again and again.
	eraseGapMerge = 8 << 20
	// erasePoll is how often Erase looks for files it waits on.
	erasePoll = 5 * time.Millisecond
	// defaultEraseWait bounds the wait for open snapshots and iterators
	// that pin purged data; a reader holding one longer fails the erase
	// (the next run erases in full).
	defaultEraseWait = 30 * time.Second
)

// EraseSpans collects the key spans purges removed. Pass one in
// PurgeOptions.Erase and then to Erase. Not safe for concurrent use.
type EraseSpans struct {
	spans     []keySpan
	collapsed bool
}

type keySpan struct{ start, end []byte }

// Len is the number of spans held.
func (e *EraseSpans) Len() int {
	if e == nil {
		return 0
	}
	return len(e.spans)
}

func (e *EraseSpans) addThread(tid string) {
	if e != nil {
		e.add(threadPrefix(tid), threadEnd(tid))
	}
}

func (e *EraseSpans) addMessage(mid string) {
	if e != nil {
		e.add(versionPrefix(mid), versionEnd(mid))
	}
}

func (e *EraseSpans) add(start, end []byte) {
	if e.collapsed {
		for i := range e.spans {
			sp := &e.spans[i]
			if sameNamespace(sp.start, start) {
				if bytes.Compare(start, sp.start) < 0 {
					sp.start = start
				}
				if bytes.Compare(end, sp.end) > 0 {
					sp.end = end
				}
				return
			}
		}
	}
	e.spans = append(e.spans, keySpan{start, end})
	if !e.collapsed && len(e.spans) > maxEraseSpans {
		e.collapse()
	}
}

// collapse keeps one span per namespace.
func (e *EraseSpans) collapse() {
	old := e.spans
	e.spans, e.collapsed = nil, true
	for _, sp := range old {
		e.add(sp.start, sp.end)
	}
}

func sameNamespace(a, b []byte) bool {
	return bytes.HasPrefix(a, []byte(versionNS)) == bytes.HasPrefix(b, []byte(versionNS))
}

// EraseOptions configure Erase.
type EraseOptions struct {
	// Rate bounds the bottom-level table bytes rewritten per second (0:
	// unbounded). A range is compacted one bottom-level table at a time,
	// with a pause after each that keeps the average at Rate, so that user
	// writes are not starved of disk and CPU by a long erase.
	Rate int64
	// Full erases the whole key space instead of the spans: the caller
	// found Erased false before its purges began, so purges that were not
	// erased may have left content anywhere.
	Full bool
	// Progress, when set, is told of each step as it begins, and of each
	// key range compacted: an erase can take minutes on a large database.
	Progress func(EraseProgress)
}

// EraseProgress is where an erase is: its step (one of the Erase* steps)
// and, while compacting, the key ranges done of Total.
type EraseProgress struct {
	Step  string `json:"step"`
	Done  int    `json:"done"`
	Total int    `json:"total"`
}

// The steps of an erase, in order.
const (
	EraseWaitReaders = "waiting for readers"
	EraseCompact     = "compacting"
	EraseRotateLogs  = "rotating logs"
	EraseRemoveFiles = "removing old files"
)

// EraseResult describes what Erase did.
type EraseResult struct {
	// Full is true when the whole key space was compacted because purges
	// not erased before may have left content anywhere.
	Full bool
	// Ranges is the number of key ranges compacted.
	Ranges int
	// TablesRemoved and LogsRemoved count the files present before the
	// erase that it saw deleted.
	TablesRemoved, LogsRemoved int
}

// Erased reports whether everything purged so far has been erased (false on
// a database written before erasure existed, or after a purge whose erase
// did not complete).
func (s *Store) Erased(ctx context.Context) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return s.has([]byte(eraseKey))
}

// OweErase records that a purge is about to delete data not yet erased.
// Not synced on its own: it is in the log before the purge's deletes, so
// no delete survives a crash without it (as with BeginPurge).
func (s *Store) OweErase(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.db.Delete([]byte(eraseKey), pebble.NoSync); err != nil {
		return fmt.Errorf("owe erase: %w", err)
	}
	return nil
}

// Erase makes the content purged in spans (with opts.Full, anywhere)
// unrecoverable from every file of the database directory. Live data is
// untouched: compactions rewrite it as is. On success it records that
// nothing purged is left to erase.
func (s *Store) Erase(ctx context.Context, spans *EraseSpans, opts EraseOptions) (EraseResult, error) {
	var res EraseResult
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.Full = opts.Full
	var ranges []keySpan
	if res.Full {
		// Every key of the store is printable ASCII.
		ranges = []keySpan{{start: []byte{0}, end: []byte{0xff}}}
	} else {
		ranges = s.mergeSpans(spans)
	}
	res.Ranges = len(ranges)

	step := func(name string, done int) {
		if opts.Progress != nil {
			opts.Progress(EraseProgress{Step: name, Done: done, Total: len(ranges)})
		}
	}
	before, err := s.files()
	if err != nil {
		return res, fmt.Errorf("erase: %w", err)
	}
	step(EraseWaitReaders, 0)
	// A snapshot older than the purge makes compactions keep the values it
	// can see. Snapshots opened later see the deletes and pin nothing.
	if err := s.waitNoSnapshots(ctx); err != nil {
		return res, fmt.Errorf("erase: %w", err)
	}
	if err := s.markBottomTables(ranges); err != nil {
		return res, fmt.Errorf("erase: %w", err)
	}
	if err := s.db.Flush(); err != nil {
		return res, fmt.Errorf("erase: flush: %w", err)
	}
	for i, r := range ranges {
		step(EraseCompact, i)
		if err := s.compactPaced(ctx, r, opts.Rate); err != nil {
			return res, fmt.Errorf("erase: compact %s: %w", r.start, err)
		}
	}
	step(EraseRotateLogs, len(ranges))
	logs, err := s.rotateLogs(ctx, before)
	res.LogsRemoved = logs
	if err != nil {
		return res, fmt.Errorf("erase: %w", err)
	}
	step(EraseRemoveFiles, len(ranges))
	tables, err := s.waitTablesGone(ctx, before)
	res.TablesRemoved = tables
	if err != nil {
		return res, fmt.Errorf("erase: %w", err)
	}
	if err := s.db.Set([]byte(eraseKey), nil, pebble.Sync); err != nil {
		return res, fmt.Errorf("erase: record: %w", err)
	}
	return res, nil
}

// markBottomTables deletes, for every bottom-level table overlapping
// ranges, a key that cannot exist (the table's smallest key followed by a
// zero byte; keys are printable). DB.Compact only compacts a level into the
// next, so a bottom-level table with nothing above it in the range would be
// left as it is, and with it any value a snapshot pinned beside its
// tombstone when an earlier compaction brought both there. The tombstones
// put every such table under a compaction from above; they are dropped at
// the bottom level.
func (s *Store) markBottomTables(ranges []keySpan) error {
	levels, err := s.db.SSTables()
	if err != nil {
		return fmt.Errorf("list tables: %w", err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, t := range levels[len(levels)-1] {
		for _, r := range ranges {
			if bytes.Compare(t.Largest.UserKey, r.start) >= 0 && bytes.Compare(t.Smallest.UserKey, r.end) < 0 {
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
func (s *Store) compactPaced(ctx context.Context, r keySpan, rate int64) error {
	if rate <= 0 {
		return s.db.Compact(ctx, r.start, r.end, false)
	}
	levels, err := s.db.SSTables()
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
		if bytes.Compare(hi, r.start) <= 0 || bytes.Compare(lo, r.end) >= 0 {
			continue
		}
		if bytes.Compare(hi, r.end) >= 0 {
			break
		}
		pieces = append(pieces, piece{end: bytes.Clone(hi), size: t.Size})
	}
	pieces = append(pieces, piece{end: r.end})
	start := r.start
	for _, p := range pieces {
		if bytes.Compare(start, p.end) >= 0 {
			continue
		}
		began := time.Now()
		if err := s.db.Compact(ctx, start, p.end, false); err != nil {
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

// mergeSpans sorts spans and joins neighbours with little data between
// them. The data between two spans is taken from the tables' metadata
// alone: EstimateDiskUsage would read blocks of every table a gap cuts,
// once per gap, which cost more than the compactions on a cold start.
func (s *Store) mergeSpans(spans *EraseSpans) []keySpan {
	if spans.Len() == 0 {
		return nil
	}
	between, err := s.tableBytes()
	if err != nil {
		// Spans compacted one by one are as erased, only slower.
		between = func(a, b []byte) uint64 { return eraseGapMerge }
	}
	in := slices.Clone(spans.spans)
	slices.SortFunc(in, func(a, b keySpan) int { return bytes.Compare(a.start, b.start) })
	out := []keySpan{in[0]}
	for _, sp := range in[1:] {
		last := &out[len(out)-1]
		if bytes.Compare(sp.start, last.end) <= 0 || between(last.end, sp.start) < eraseGapMerge {
			if bytes.Compare(sp.end, last.end) > 0 {
				last.end = sp.end
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
func (s *Store) tableBytes() (func(a, b []byte) uint64, error) {
	levels, err := s.db.SSTables()
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

func (s *Store) files() (dbFiles, error) {
	f := dbFiles{tables: map[string]bool{}, logs: map[string]bool{}}
	entries, err := os.ReadDir(s.path)
	if err != nil {
		return f, fmt.Errorf("list %s: %w", s.path, err)
	}
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".sst", ".blob":
			f.tables[e.Name()] = true
		case ".log":
			f.logs[e.Name()] = true
		}
	}
	return f, nil
}

// waitNoSnapshots waits for a moment with no open snapshot.
func (s *Store) waitNoSnapshots(ctx context.Context) error {
	return s.poll(ctx, func() (bool, error) {
		return s.db.Metrics().Snapshots.Count == 0, nil
	}, "snapshots still open")
}

// rotateLogs starts new WAL files until none of the logs in before is left.
// Each forced flush starts a fresh log (noRecycleFS never reuses one with an
// old tail) and retires the previous one; Pebble keeps a few retired logs
// for reuse, so it takes up to that many rotations to consume them all.
func (s *Store) rotateLogs(ctx context.Context, before dbFiles) (int, error) {
	removed := 0
	rotations := 0
	err := s.poll(ctx, func() (bool, error) {
		now, err := s.files()
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
			if err := s.db.Flush(); err != nil {
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
func (s *Store) waitTablesGone(ctx context.Context, before dbFiles) (int, error) {
	removed := 0
	err := s.poll(ctx, func() (bool, error) {
		live, err := s.liveTables()
		if err != nil {
			return false, err
		}
		now, err := s.files()
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
func (s *Store) liveTables() (map[string]bool, error) {
	levels, err := s.db.SSTables()
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
// the store's erase wait passes (ErrEraseIncomplete, with what).
func (s *Store) poll(ctx context.Context, done func() (bool, error), what string) error {
	deadline := time.Now().Add(s.eraseWait)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s after %s", ErrEraseIncomplete, what, s.eraseWait)
		}
		t.Reset(erasePoll)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// noRecycleFS never reuses an old WAL file: ReuseForWrite (whose contract
// allows it) removes the old file and creates the new one, so no log keeps
// records of an earlier log in its tail.
type noRecycleFS struct{ vfs.FS }

func (fs noRecycleFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.Remove(oldname); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	return fs.Create(newname, category)
}
