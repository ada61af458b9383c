package cluster

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/wire"
)

// copyCoordinator is the run lease of the replay on a shard's new copy
// before the hand-over: nothing else reaches the copy, which is neither
// owned nor served yet, so the lease is local, and its writes carry no
// epoch (the copy's fence is below the one the hand-over brings).
type copyCoordinator struct{ owner string }

func (c copyCoordinator) Acquire(ctx context.Context) (retention.HeldLease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	now := wire.At(time.Now().UTC())
	return &copyLease{info: retention.LeaseInfo{Owner: c.owner + "/move", Host: host, PID: os.Getpid(),
		AcquiredAt: now, RenewedAt: now}, done: make(chan struct{})}, nil
}

type copyLease struct {
	info retention.LeaseInfo
	once sync.Once
	done chan struct{}
}

func (l *copyLease) Info() retention.LeaseInfo { return l.info }
func (l *copyLease) Done() <-chan struct{}     { return l.done }
func (l *copyLease) Renew(context.Context) error {
	return l.Check()
}

func (l *copyLease) Check() error {
	select {
	case <-l.done:
		return fmt.Errorf("%w: released", retention.ErrLeaseLost)
	default:
		return nil
	}
}

func (l *copyLease) Heartbeat(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-l.done:
	}
}

func (l *copyLease) Release() error {
	l.once.Do(func() { close(l.done) })
	return nil
}
