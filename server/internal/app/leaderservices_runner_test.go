package app

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/replica"
)

// termLog records the terms a leaderServices runs, per shard, and which
// of them are running.
type termLog struct {
	mu      sync.Mutex
	started []string
	running map[int]uint64
	overlap string
}

func (l *termLog) lead(ctx context.Context, n int, term uint64) {
	l.mu.Lock()
	if r, ok := l.running[n]; ok && l.overlap == "" {
		l.overlap = fmt.Sprintf("shard %d: term %d started while %d ran", n, term, r)
	}
	l.running[n] = term
	l.started = append(l.started, fmt.Sprintf("%d@%d", n, term))
	l.mu.Unlock()
	<-ctx.Done()
	time.Sleep(20 * time.Millisecond) // stopping takes a while
	l.mu.Lock()
	delete(l.running, n)
	l.mu.Unlock()
}

func (l *termLog) state() (started string, running map[int]uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	running = map[int]uint64{}
	for n, term := range l.running {
		running[n] = term
	}
	return fmt.Sprint(l.started), running
}

// The runner starts a shard's services for each lease told, those told
// before it started included, stops them when the lease ends or a later
// term's begins, never runs two terms of one shard at once, and Stop
// waits for every shard's services to stop.
func TestLeaderServicesFollowTheLeases(t *testing.T) {
	l := &termLog{running: map[int]uint64{}}
	s := newLeaderServices()
	s.tell(replica.LeaseChange{Group: 1, Term: 4}) // before Start
	s.tell(replica.LeaseChange{Group: 2, Term: 0}) // an end of nothing
	s.Start(context.Background(), l.lead)
	wait := func(what, started string, running map[int]uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			gotStarted, gotRunning := l.state()
			if gotStarted == started && fmt.Sprint(gotRunning) == fmt.Sprint(running) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: started %s, running %v; want %s, %v", what, gotStarted, gotRunning, started, running)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait("a lease told before the start", "[1@4]", map[int]uint64{1: 4})
	s.tell(replica.LeaseChange{Group: 3, Term: 2})
	wait("a second shard", "[1@4 3@2]", map[int]uint64{1: 4, 3: 2})
	s.tell(replica.LeaseChange{Group: 1, Term: 6}) // term 4's lease ended by term 6's
	wait("the next term", "[1@4 3@2 1@6]", map[int]uint64{1: 6, 3: 2})
	s.tell(replica.LeaseChange{Group: 3, Term: 0})
	s.tell(replica.LeaseChange{Group: 3, Term: 0}) // told twice: nothing more
	wait("a lease's end", "[1@4 3@2 1@6]", map[int]uint64{1: 6})
	// A lease that begins and ends before the runner looks runs nothing
	// or stops at once.
	s.tell(replica.LeaseChange{Group: 5, Term: 9})
	s.tell(replica.LeaseChange{Group: 5, Term: 0})
	s.Stop()
	s.Stop()
	started, running := l.state()
	if len(running) != 0 {
		t.Fatalf("services still running after Stop: %v (started %s)", running, started)
	}
	if started != "[1@4 3@2 1@6]" && started != "[1@4 3@2 1@6 5@9]" {
		t.Fatalf("started %s", started)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.overlap != "" {
		t.Fatal(l.overlap)
	}
}

// The shards whose services run are the erasure worker's to follow:
// Owned lists them, and Changed closes at each start and stop.
func TestLeaderServicesListTheShardsTheyLead(t *testing.T) {
	s := newLeaderServices()
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	before := s.Changed()
	s.mark(3, true)
	s.mark(1, true)
	if got := fmt.Sprint(sorted(s.Owned())); got != "[1 3]" || !closed(before) || s.Moving(3) {
		t.Fatalf("owned %s, changed closed %v", got, closed(before))
	}
	before = s.Changed()
	if closed(before) {
		t.Fatal("a new Changed is closed")
	}
	s.mark(3, false)
	if got := fmt.Sprint(sorted(s.Owned())); got != "[1]" || !closed(before) {
		t.Fatalf("owned %s after a stop, changed closed %v", got, closed(before))
	}
}

func sorted(xs []int) []int {
	slices.Sort(xs)
	return xs
}
