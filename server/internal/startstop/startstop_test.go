package startstop

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestStopBeforeStartAndTwice(t *testing.T) {
	var b Base
	b.Stop() // never started: nothing to wait for
	if b.Stopped() != nil {
		t.Fatal("Stopped is not nil before Start")
	}
	var ran atomic.Int32
	if !b.Start(context.Background(), nil, func(ctx context.Context) { ran.Add(1); <-ctx.Done() }) {
		t.Fatal("Start after an early Stop did not start")
	}
	b.Stop()
	b.Stop()
	select {
	case <-b.Stopped():
	default:
		t.Fatal("Stopped not closed after Stop")
	}
	if ran.Load() != 1 {
		t.Fatalf("run ran %d times, want 1", ran.Load())
	}
}

func TestStartOnce(t *testing.T) {
	var b Base
	var prepared, ran atomic.Int32
	start := func() bool {
		return b.Start(context.Background(), func() { prepared.Add(1) }, func(ctx context.Context) { ran.Add(1); <-ctx.Done() })
	}
	var wg sync.WaitGroup
	var started atomic.Int32
	for range 8 {
		wg.Go(func() {
			if start() {
				started.Add(1)
			}
		})
	}
	wg.Wait()
	b.Stop()
	if start() {
		t.Fatal("a stopped service started again")
	}
	if started.Load() != 1 || prepared.Load() != 1 || ran.Load() != 1 {
		t.Fatalf("started %d, prepared %d, ran %d times; want once each", started.Load(), prepared.Load(), ran.Load())
	}
}

// TestStopWaitsForRun: Stop returns only once run has, so a service can
// close what run uses right after it.
func TestStopWaitsForRun(t *testing.T) {
	var b Base
	var done atomic.Bool
	b.Start(context.Background(), nil, func(ctx context.Context) {
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // a batch finishing after the cancel
		done.Store(true)
	})
	var wg sync.WaitGroup
	for range 4 { // concurrent Stops all wait
		wg.Go(func() {
			b.Stop()
			if !done.Load() {
				t.Error("Stop returned before run did")
			}
		})
	}
	wg.Wait()
}

// TestParentContextEndsRun: run also ends with Start's context, and
// Stopped tells; a Stop afterwards returns at once.
func TestParentContextEndsRun(t *testing.T) {
	var b Base
	ctx, cancel := context.WithCancel(context.Background())
	b.Start(ctx, nil, func(ctx context.Context) { <-ctx.Done() })
	cancel()
	select {
	case <-b.Stopped():
	case <-time.After(5 * time.Second):
		t.Fatal("run did not end with Start's context")
	}
	b.Stop()
}
