package store

import (
	"bytes"
	"context"
	"fmt"

	"github.com/progressdb/progressdb/server/pkg/erase"
	"github.com/progressdb/progressdb/server/pkg/pebbledir"
)

// Physical erasure (docs/erasure.md). A purge only writes tombstones; the
// erase package makes what they removed unrecoverable from the files. The
// store chooses what to erase (the spans its purges removed, or everything
// when earlier purges were not erased) and remembers that it is done.

// eraseKey records that everything purged so far has been erased. It is
// removed (OweErase) before a purge's first delete and written back by a
// successful Erase: a database where it is missing (written by an earlier
// version, or a run that crashed, failed to erase, or ran with erasure off)
// gets a full erase of its whole key space once.
const eraseKey = "sys:erased"

// ErrEraseIncomplete means files holding purged content were still on disk
// when Erase gave up waiting for them.
var ErrEraseIncomplete = erase.ErrIncomplete

const (
	// maxEraseSpans bounds the spans an EraseSpans keeps one by one; past
	// it, each namespace collapses into one span from its lowest to its
	// highest key, which costs a larger compaction but no more memory.
	maxEraseSpans = 1 << 16
	// eraseGapMerge: two purged spans are compacted as one when the data
	// between them is smaller than this.
	eraseGapMerge = erase.GapMerge
	// defaultEraseWait bounds the wait for open snapshots and iterators
	// that pin purged data; a reader holding one longer fails the erase
	// (the next run erases in full).
	defaultEraseWait = erase.DefaultWait
)

// EraseSpans collects the key spans purges removed. Pass one in
// PurgeOptions.Erase and then to Erase. Not safe for concurrent use.
type EraseSpans struct {
	spans     []erase.Span
	collapsed bool
}

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
			if sameNamespace(sp.Start, start) {
				if bytes.Compare(start, sp.Start) < 0 {
					sp.Start = start
				}
				if bytes.Compare(end, sp.End) > 0 {
					sp.End = end
				}
				return
			}
		}
	}
	e.spans = append(e.spans, erase.Span{Start: start, End: end})
	if !e.collapsed && len(e.spans) > maxEraseSpans {
		e.collapse()
	}
}

// collapse keeps one span per namespace.
func (e *EraseSpans) collapse() {
	old := e.spans
	e.spans, e.collapsed = nil, true
	for _, sp := range old {
		e.add(sp.Start, sp.End)
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
type EraseProgress = erase.Progress

// The steps of an erase, in order.
const (
	EraseWaitReaders = erase.WaitReaders
	EraseCompact     = erase.Compact
	EraseRotateLogs  = erase.RotateLogs
	EraseRemoveFiles = erase.RemoveFiles
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
	b := s.db.NewBatch()
	_ = b.Delete([]byte(eraseKey), nil)
	if err := s.apply(ctx, write{kind: writeErase, batch: b}); err != nil {
		return fmt.Errorf("owe erase: %w", err)
	}
	return nil
}

// recordErased records that nothing purged is left to erase.
func (s *Store) recordErased(ctx context.Context, sync bool) error {
	b := s.db.NewBatch()
	_ = b.Set([]byte(eraseKey), nil, nil)
	return s.apply(ctx, write{kind: writeErase, batch: b, sync: sync})
}

// Erase makes the content purged in spans (with opts.Full, anywhere)
// unrecoverable from every file of the database directory. Live data is
// untouched: compactions rewrite it as is. On success it records that
// nothing purged is left to erase.
func (s *Store) Erase(ctx context.Context, spans *EraseSpans, opts EraseOptions) (EraseResult, error) {
	return s.erase(ctx, spans, opts, func(ctx context.Context) error { return s.recordErased(ctx, true) })
}

// erase is Erase with the step that records it done.
func (s *Store) erase(ctx context.Context, spans *EraseSpans, opts EraseOptions, record func(context.Context) error) (EraseResult, error) {
	var res EraseResult
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.Full = opts.Full
	if !res.Full && spans.Len() == 0 {
		// Nothing plain was purged: a shredded thread's records are
		// ciphertext whose keys are gone (spec §12, design §6), so no
		// table or log holds content to erase, and the flush and log
		// rotations would only hold up writers.
		if err := record(ctx); err != nil {
			return res, fmt.Errorf("erase: record: %w", err)
		}
		return res, nil
	}
	var ranges []erase.Span
	if res.Full {
		// Every key of the store is printable ASCII.
		ranges = []erase.Span{{Start: []byte{0}, End: []byte{0xff}}}
	} else {
		ranges = s.mergeSpans(spans)
	}
	// A backup's staging checkpoint holds the database as it was before
	// the purge. It is in the folder only while the backup opens its files
	// (the archive is streamed from open files, so a slow or stalled
	// client keeps nothing there); an erase that outlasts one fails.
	// A folder that cannot be listed counts as held: erased is claimed
	// only when nothing can be left.
	held := func() bool { return pebbledir.HasCheckpoints(s.path) }
	// Run's own writes are deletes of keys that cannot exist (it marks
	// tables for compaction with them): no thread's liveness changes.
	er, err := erase.Run(ctx, s.db, s.path, ranges, erase.Options{Rate: opts.Rate, Wait: s.eraseWait, Progress: opts.Progress, Held: held})
	res.Ranges, res.TablesRemoved, res.LogsRemoved = er.Ranges, er.TablesRemoved, er.LogsRemoved
	if err != nil {
		return res, fmt.Errorf("erase: %w", err)
	}
	if err := record(ctx); err != nil {
		return res, fmt.Errorf("erase: record: %w", err)
	}
	return res, nil
}

// mergeSpans sorts spans and joins neighbours with little data between
// them, so a table is not rewritten once per purged item.
func (s *Store) mergeSpans(spans *EraseSpans) []erase.Span {
	if spans.Len() == 0 {
		return nil
	}
	all := spans.spans
	// The Raft log's dropped entries wrote the purged items too.
	if sp, ok := s.raftDropped(); ok {
		all = append(all[:len(all):len(all)], sp)
	}
	return erase.Merge(s.db, all, eraseGapMerge)
}
