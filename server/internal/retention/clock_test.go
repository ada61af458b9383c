package retention

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"
)

// fakeClock is a Clock that moves only when a test advances it.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed (and replaced) whenever a timer is added
}

type fakeTimer struct {
	c    *fakeClock
	when time.Time
	d    time.Duration
	ch   chan time.Time
}

func newFakeClock(t time.Time) *fakeClock {
	return &fakeClock{now: t, changed: make(chan struct{})}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, when: c.now.Add(d), d: d, ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	close(c.changed)
	c.changed = make(chan struct{})
	return t
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Advance moves the clock by d and fires the timers that fall due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.when.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	c.timers = kept
}

// waitTimers waits until at least n timers are pending and returns their
// durations, shortest first.
func (c *fakeClock) waitTimers(t testing.TB, n int) []time.Duration {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		if len(c.timers) >= n {
			ds := make([]time.Duration, 0, len(c.timers))
			for _, x := range c.timers {
				ds = append(ds, x.d)
			}
			c.mu.Unlock()
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			return ds
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("waited 10s for %d pending timer(s)", n)
		}
	}
}

func TestJitterStaysWithinTwentyPercent(t *testing.T) {
	const d = 10 * time.Second
	seen := map[bool]int{}
	for range 2000 {
		j := jitter(d)
		if j < 8*time.Second || j > 12*time.Second {
			t.Fatalf("jitter(%s) = %s, outside ±20%%", d, j)
		}
		seen[j < d]++
	}
	if seen[true] == 0 || seen[false] == 0 {
		t.Fatalf("jitter never went both ways: %v", seen)
	}
	if got := jitter(0); got != 0 {
		t.Fatalf("jitter(0) = %s", got)
	}
}

func TestSleepIsCancellable(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sleep(ctx, SystemClock{}, time.Hour) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("sleep returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("sleep did not end when its context was cancelled")
	}
}

func TestSleepWaitsForTheClock(t *testing.T) {
	clock := newFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	done := make(chan error, 1)
	go func() { done <- sleep(context.Background(), clock, time.Minute) }()
	clock.waitTimers(t, 1)
	select {
	case <-done:
		t.Fatal("sleep returned before the clock moved")
	default:
	}
	clock.Advance(time.Minute)
	if err := <-done; err != nil {
		t.Fatalf("sleep: %v", err)
	}
}
