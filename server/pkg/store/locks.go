package store

import "sync"

const stripeCount = 256

// stripes serialise read-check-write sequences per thread without a mutex
// per thread: every mutation of a thread or of its messages holds the stripe
// of the thread ID, so a restore and the start of a purge cannot interleave.
type stripes [stripeCount]sync.Mutex

func stripeOf(id string) int {
	// FNV-1a, inlined to stay allocation-free.
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return int(h % stripeCount)
}

// held is a taken stripe (or pair) that a writer releases as soon as its
// batch is applied, before waiting for the batch to be durable: writers of
// one thread then share fsyncs instead of queueing for one each. Releasing
// twice is a no-op, so callers can also release it in a defer. It names
// its stripes rather than holding an unlock closure: every write takes one.
type held struct {
	s      *stripes
	i, j   int // j < 0: one stripe; i < 0: every stripe
	locked bool
	// term is the replicated store's lease when the stripes were taken
	// (Proposer.Lease): the write evaluated under them is proposed in that
	// term or not at all. 0 when the store is not replicated.
	term uint64
}

// hold takes the stripe of id for a write, noting the lease of a
// replicated store: it is read once the stripe is held, so that the
// write's reads happen under it.
func (s *Store) hold(id string) *held {
	h := s.locks.hold(id)
	if r := s.repl.Load(); r != nil {
		h.term = r.p.Lease()
	}
	return h
}

// holdPair is hold for two IDs (stripes.holdPair).
func (s *Store) holdPair(a, b string) *held {
	h := s.locks.holdPair(a, b)
	if r := s.repl.Load(); r != nil {
		h.term = r.p.Lease()
	}
	return h
}

// holdAll is hold for every stripe (an index rebuild), taken in index
// order.
func (s *Store) holdAll() *held {
	for i := range s.locks {
		s.locks[i].Lock()
	}
	h := &held{s: &s.locks, i: -1, j: -1, locked: true}
	if r := s.repl.Load(); r != nil {
		h.term = r.p.Lease()
	}
	return h
}

// handOver moves the stripes h holds to a new held, which the caller
// releases later: h's own release (a writer's defer) becomes a no-op.
func (h *held) handOver() *held {
	moved := *h
	h.locked = false
	return &moved
}

// hold takes the stripe of id.
func (s *stripes) hold(id string) *held {
	i := stripeOf(id)
	s[i].Lock()
	return &held{s: s, i: i, j: -1, locked: true}
}

// holdPair takes the stripes of two IDs in index order, so that two
// callers taking pairs can never deadlock; an ID pair on one stripe takes
// it once.
func (s *stripes) holdPair(a, b string) *held {
	i, j := stripeOf(a), stripeOf(b)
	if i == j {
		j = -1
	} else if i > j {
		i, j = j, i
	}
	s[i].Lock()
	if j >= 0 {
		s[j].Lock()
	}
	return &held{s: s, i: i, j: j, locked: true}
}

func (h *held) release() {
	if !h.locked {
		return
	}
	h.locked = false
	if h.i < 0 {
		for i := len(h.s) - 1; i >= 0; i-- {
			h.s[i].Unlock()
		}
		return
	}
	if h.j >= 0 {
		h.s[h.j].Unlock()
	}
	h.s[h.i].Unlock()
}
