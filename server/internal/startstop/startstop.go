// Package startstop is the lifecycle of a background service: one
// goroutine started once, stopped by cancelling its context and waiting
// for it. Services hold a Base and give their own Start and Stop, which
// add what is theirs (metrics, logs) around it.
package startstop

import (
	"context"
	"sync"
)

// Base runs one service's goroutine. Its zero value is ready. Start
// starts it once; Stop may be called before Start, twice, or from several
// goroutines. A service once stopped does not start again.
type Base struct {
	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	stopped chan struct{} // closed when the goroutine returned; nil before Start
}

// Start runs prepare, when set, and then run in a goroutine of its own on
// a context that ends with ctx or Stop. prepare runs under the lifecycle's
// lock, so a Stop called meanwhile waits for it and never undoes less
// than it did. Start returns at once; it reports false, doing nothing,
// when the service was started before.
func (b *Base) Start(ctx context.Context, prepare func(), run func(context.Context)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started {
		return false
	}
	b.started = true
	if prepare != nil {
		prepare()
	}
	ctx, b.cancel = context.WithCancel(ctx)
	b.stopped = make(chan struct{})
	go func(stopped chan struct{}) {
		defer close(stopped)
		run(ctx)
	}(b.stopped)
	return true
}

// Stop cancels the goroutine's context and waits for it to return. It
// does nothing more when the service never started or stopped before.
func (b *Base) Stop() {
	b.mu.Lock()
	cancel, stopped := b.cancel, b.stopped
	b.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-stopped
}

// Stopped returns a channel closed once the service's goroutine returned:
// after Stop, or when run ended of itself. It is nil before Start.
func (b *Base) Stopped() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopped
}
