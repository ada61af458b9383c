package replica

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/wire"
)

// RetentionCoordinator is the run lease of a replicated shard's
// retention (docs/replication-design.md §9): leadership itself. A run
// starts only on the replica that leads the group and has applied an
// entry of its term (the lease its writes are proposed under), its epoch
// is that term, and it stops once this replica no longer leads in that
// term. owner names the holder in the run's audit header (the node).
//
// Leadership is not exclusive in wall-clock time: a leader cut off keeps
// it until CheckQuorum steps it down, while the others may elect a new
// one. What keeps a deposed leader's run from acting is that its writes
// are proposed in its term and a command applies only in its own term.
func (h *Host) RetentionCoordinator(groupID uint64, owner string) retention.Coordinator {
	return leaderRuns{h: h, group: groupID, owner: owner}
}

type leaderRuns struct {
	h     *Host
	group uint64
	owner string
}

// Acquire takes the lease while this replica serves the group; another
// replica's leadership, or none, is a *retention.LeaseHeldError naming
// no holder (a run elsewhere is the leader's, known to etcd's record).
func (c leaderRuns) Acquire(ctx context.Context) (retention.HeldLease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g := c.h.group(c.group)
	if g == nil {
		return nil, fmt.Errorf("group %d: %w", c.group, ErrNoGroup)
	}
	g.mu.Lock()
	term, end := g.lease.Load(), g.leaseEnd
	g.mu.Unlock()
	if term == 0 {
		return nil, &retention.LeaseHeldError{}
	}
	host, pid, now := "", 0, (func() time.Time)(nil)
	if err := retention.FillHolder(&host, &pid, &now); err != nil {
		return nil, fmt.Errorf("group %d: %w", c.group, err)
	}
	at := wire.At(now().UTC())
	l := &leaderLease{g: g, term: term, released: make(chan struct{}), done: make(chan struct{}),
		info: retention.LeaseInfo{Owner: c.owner, Host: host, PID: pid, Epoch: int64(term), AcquiredAt: at, RenewedAt: at}}
	go func() {
		select {
		case <-end:
			l.end()
		case <-l.released:
		}
	}()
	return l, nil
}

// leaderLease is a run's view of this replica's leadership in one term;
// raft keeps the leadership, so there is nothing to renew.
type leaderLease struct {
	g        *group
	term     uint64
	info     retention.LeaseInfo
	released chan struct{} // closed by Release
	done     chan struct{} // closed when the term's lease ends or the run releases
	release  sync.Once
	ended    sync.Once
}

func (l *leaderLease) end() { l.ended.Do(func() { close(l.done) }) }

func (l *leaderLease) Info() retention.LeaseInfo { return l.info }
func (l *leaderLease) Done() <-chan struct{}     { return l.done }

// Check fails once the lease of the term it was taken in ended: this
// replica stepped down, or leads in another term.
func (l *leaderLease) Check() error {
	select {
	case <-l.released:
		return fmt.Errorf("%w: released", retention.ErrLeaseLost)
	default:
	}
	if now := l.g.lease.Load(); now != l.term {
		return fmt.Errorf("%w: replica %d no longer leads group %d in term %d", retention.ErrLeaseLost, l.g.replica, l.g.id, l.term)
	}
	return nil
}

// Renew only checks: raft keeps the leadership.
func (l *leaderLease) Renew(context.Context) error { return l.Check() }

// Heartbeat waits for the lease's end: raft keeps the leadership.
func (l *leaderLease) Heartbeat(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-l.done:
	}
}

// Release ends the run's view; the leadership stays.
func (l *leaderLease) Release() error {
	l.release.Do(func() { close(l.released) })
	l.end()
	return nil
}

var _ retention.HeldLease = (*leaderLease)(nil)
