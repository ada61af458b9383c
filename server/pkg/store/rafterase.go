package store

// A purge reaches every replica's files (docs/replication-design.md §11).
// Each replica applies a purge command like any other, and the command
// owes the erase on that replica (sys:erased goes in its batch); the
// group then drops its log up to the purge (Truncate), whose entries
// hold the purged content too, and erases both here (EraseApplied).

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/erase"
)

// purgedSpans is what a purge's batch deletes, as spans to erase.
func purgedSpans(b *pebble.Batch) ([]erase.Span, error) {
	var spans []erase.Span
	r := b.Reader()
	for {
		kind, key, value, ok, err := r.Next()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		if !ok {
			return spans, nil
		}
		switch kind {
		case pebble.InternalKeyKindDelete, pebble.InternalKeyKindSingleDelete, pebble.InternalKeyKindDeleteSized:
			k := append([]byte(nil), key...)
			spans = append(spans, erase.Span{Start: k, End: append(k[:len(k):len(k)], 0)})
		case pebble.InternalKeyKindRangeDelete:
			spans = append(spans, erase.Span{Start: append([]byte(nil), key...), End: append([]byte(nil), value...)})
		}
	}
}

// notePurge records a purge applied at index and the spans it removed.
func (l *RaftLog) notePurge(index uint64, spans []erase.Span) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.purged = max(l.purged, index)
	for _, sp := range spans {
		l.owed.add(sp.Start, sp.End)
	}
}

// Purges returns the index of the last purge this process applied and
// of the last one it erased (EraseApplied): the replica owes an erase
// while applied > erased.
func (l *RaftLog) Purges() (applied, erased uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.purged, l.erased
}

// Truncate records a snapshot point at the applied index, with the
// membership applied and the descriptor data, and drops every entry up
// to and including to (at most the applied index): raft then sends a
// snapshot to a follower that needs them. Either part is skipped when
// it is already done.
func (l *RaftLog) Truncate(ctx context.Context, to uint64, data []byte) error {
	l.mu.Lock()
	applied, snap, trunc := l.applied, l.snap.GetMetadata().GetIndex(), l.truncIdx
	cs := l.conf
	if cs == nil {
		cs = l.snap.GetMetadata().GetConfState()
	}
	l.mu.Unlock()
	if to > applied {
		return fmt.Errorf("%w: truncate to %d past the applied index %d", ErrRaftLog, to, applied)
	}
	var u RaftUpdate
	if applied > snap {
		u.Record = &RaftSnapshotPoint{Index: applied, ConfState: cs, Data: data}
	}
	if to > trunc {
		u.Compact = to
	}
	if u.Record == nil && u.Compact == 0 {
		return nil
	}
	return l.Save(ctx, u)
}

// droppedSpan is the span of the entries dropped from the log so far.
func (l *RaftLog) droppedSpan() (erase.Span, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.truncIdx == 0 {
		return erase.Span{}, false
	}
	return erase.Span{Start: raftLogKey(0), End: raftLogKey(l.truncIdx + 1)}, true
}

// EraseApplied erases what the purges this replica applied removed,
// with the entries dropped from its log, and records it erased unless a
// purge was applied meanwhile. A store whose erase is owed from before
// (sys:erased missing: a restart after a purge, a snapshot of a leader
// that owed one) is erased in full. It returns the index of the last
// purge it covers; on an error the debt stays for the next call.
func (s *Store) EraseApplied(ctx context.Context, opts EraseOptions) (uint64, EraseResult, error) {
	l, err := s.RaftLog(ctx)
	if err != nil {
		return 0, EraseResult{}, err
	}
	erased, err := s.Erased(ctx)
	if err != nil {
		return 0, EraseResult{}, err
	}
	l.mu.Lock()
	upTo, owed := l.purged, l.owed
	l.owed = EraseSpans{}
	l.mu.Unlock()
	giveBack := func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, sp := range owed.spans {
			l.owed.add(sp.Start, sp.End)
		}
	}
	if erased && owed.Len() == 0 {
		return upTo, EraseResult{}, nil
	}
	// Owed with no span known here: whatever was purged may be anywhere.
	opts.Full = opts.Full || owed.Len() == 0
	// The entries dropped from the log join the spans (mergeSpans).
	spans := owed
	record := func(ctx context.Context) error {
		l.purgeMu.Lock()
		defer l.purgeMu.Unlock()
		if p, _ := l.Purges(); p != upTo {
			return nil // a later purge owes its own erase
		}
		return s.recordErased(ctx, true)
	}
	res, err := s.erase(ctx, &spans, opts, record)
	if err != nil {
		giveBack()
		return upTo, res, err
	}
	l.mu.Lock()
	l.erased = max(l.erased, upTo)
	l.mu.Unlock()
	return upTo, res, nil
}

// raftDropped is the span of the entries dropped from a replicated
// store's log, for every erase of its purges.
func (s *Store) raftDropped() (erase.Span, bool) {
	if l := s.raftLog.Load(); l != nil {
		return l.droppedSpan()
	}
	return erase.Span{}, false
}
