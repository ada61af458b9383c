package replica

import "sync"

// scheduler is the queue of groups with work (a message, a tick, a
// proposal): each group is queued at most once however much work piles
// up, and a worker takes the oldest. A group with nothing to do costs
// nothing. Lock order: scheduler.mu is never held while a group's lock
// is taken.
type scheduler struct {
	mu      sync.Mutex
	wake    *sync.Cond
	queue   []uint64        // guarded by mu
	queued  map[uint64]bool // guarded by mu
	stopped bool            // guarded by mu
}

func newScheduler() *scheduler {
	s := &scheduler{queued: make(map[uint64]bool)}
	s.wake = sync.NewCond(&s.mu)
	return s
}

// enqueue marks group id as having work.
func (s *scheduler) enqueue(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.queued[id] {
		return
	}
	s.queued[id] = true
	s.queue = append(s.queue, id)
	s.wake.Signal()
}

// next waits for a group with work; false once the scheduler stopped.
// The group leaves the queue as it is taken, so work that arrives while
// a worker handles it queues it again.
func (s *scheduler) next() (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) == 0 && !s.stopped {
		s.wake.Wait()
	}
	if s.stopped {
		return 0, false
	}
	id := s.queue[0]
	s.queue = s.queue[1:]
	delete(s.queued, id)
	return id, true
}

// stop wakes every worker and makes next return false.
func (s *scheduler) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	s.wake.Broadcast()
}
