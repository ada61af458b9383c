package store

import (
	"sync"
	"sync/atomic"
)

// liveMemo remembers the threads appends found live, so that the next
// append to a thread does not read its metadata again: in a busy database
// the record lies under every memtable written since the thread was
// created, and that read was the largest cost of an append after the
// sync. Every commit other than an append's forgets everything (forget,
// by moving the epoch; apply in commit.go decides), before its writer
// lets go of its stripes: an append holds its thread's stripe from the
// check to its commit, so it sees a change of its thread committed under
// that stripe (a delete, a restore, a purge) as a read of the record
// would.
type liveMemo struct {
	epoch atomic.Uint64

	mu   sync.Mutex
	live map[string]uint64 // thread ID → the epoch it was read live in
}

// liveMemoMax bounds the memo; past it, it starts over.
const liveMemoMax = 1 << 14

// forget drops every entry. Called by settle (commit.go) after each
// commit other than an append's, and after a failed one (it may still be
// applied).
func (m *liveMemo) forget() { m.epoch.Add(1) }

// known reports whether tid was found live in the current epoch, and
// returns the epoch to remember it in after a read.
func (m *liveMemo) known(tid string) (bool, uint64) {
	e := m.epoch.Load()
	m.mu.Lock()
	got, ok := m.live[tid]
	m.mu.Unlock()
	return ok && got == e, e
}

// remember records that tid was read live in epoch e (read before the
// record was): an entry of a past epoch is never taken.
func (m *liveMemo) remember(tid string, e uint64) {
	m.mu.Lock()
	if m.live == nil || len(m.live) >= liveMemoMax {
		m.live = make(map[string]uint64)
	}
	m.live[tid] = e
	m.mu.Unlock()
}
