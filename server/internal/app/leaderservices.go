package app

import (
	"context"
	"maps"
	"sync"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/startstop"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// leaderServices runs, on a node of a cluster of replicated shards, the
// services an owner runs for an owned shard (retention, backups: a
// replicated shard's backups are its leader's) for each shard whose
// replica here holds its group's lease (docs/replication-design.md §9):
// started when the host tells that the
// lease began (replica.Config.OnLease), stopped and waited for when it
// ends. The host tells of every group it runs, those a move or a dead
// node's replacement adds while the node runs too. One shard's terms run
// one after the other: the next term's services start once the last
// one's stopped.
type leaderServices struct {
	life startstop.Base
	mu   sync.Mutex
	// leases is the last lease told per shard (0: ended), including
	// those told before Start.
	leases map[int]uint64
	kick   chan struct{} // buffered: a change to look at
	// leading are the shards whose services run now (marked by lead),
	// and changed is closed at the next change of them (a new one each
	// time): the cluster's erasure worker follows them.
	leading map[int]bool
	changed chan struct{}
}

var _ cluster.ErasureShards = (*leaderServices)(nil)

func newLeaderServices() *leaderServices {
	return &leaderServices{leases: make(map[int]uint64), kick: make(chan struct{}, 1), leading: make(map[int]bool),
		changed: make(chan struct{})}
}

// mark records that shard n's services started (on) or stopped.
func (s *leaderServices) mark(n int, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.leading[n] = true
	} else {
		delete(s.leading, n)
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// Owned lists the shards whose leader services run here now
// (cluster.ErasureShards).
func (s *leaderServices) Owned() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, 0, len(s.leading))
	for n := range s.leading {
		out = append(out, n)
	}
	return out
}

// Changed is closed at the next start or stop of a shard's services.
func (s *leaderServices) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Moving is always false: a replicated shard moves replica by replica,
// its leader serving meanwhile.
func (s *leaderServices) Moving(int) bool { return false }

// tell records a lease's start or end; it never blocks (the host's
// worker calls it).
func (s *leaderServices) tell(l replica.LeaseChange) {
	s.mu.Lock()
	s.leases[int(l.Group)] = l.Term
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// leaderTerm is one shard's services of one term (0: none, the last
// term's stopping).
type leaderTerm struct {
	term   uint64
	cancel context.CancelFunc
	done   chan struct{} // closed once they stopped, and every earlier term's
}

// Start runs lead(ctx, n, term) for each lease of a shard n held here,
// those told before included, until the lease ends (ctx ends then),
// Stop, or ctx. lead returns once the services it started stopped.
func (s *leaderServices) Start(ctx context.Context, lead func(ctx context.Context, n int, term uint64)) {
	s.life.Start(ctx, nil, func(ctx context.Context) { s.run(ctx, lead) })
}

// Stop stops every shard's services and waits for them. It may be called
// before Start, or twice.
func (s *leaderServices) Stop() { s.life.Stop() }

func (s *leaderServices) run(ctx context.Context, lead func(context.Context, int, uint64)) {
	running := map[int]*leaderTerm{}
	defer func() {
		for _, r := range running {
			r.cancel()
		}
		for _, r := range running {
			<-r.done
		}
	}()
	for {
		s.mu.Lock()
		leases := maps.Clone(s.leases)
		s.mu.Unlock()
		for n, term := range leases {
			prev := running[n]
			if (prev == nil && term == 0) || (prev != nil && prev.term == term) {
				continue
			}
			if prev != nil {
				prev.cancel()
			}
			tctx, cancel := context.WithCancel(ctx)
			next := &leaderTerm{term: term, cancel: cancel, done: make(chan struct{})}
			running[n] = next
			go func() {
				defer close(next.done)
				defer cancel()
				if prev != nil {
					<-prev.done
				}
				if term != 0 && tctx.Err() == nil {
					lead(tctx, n, term)
				}
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		}
	}
}

// lead runs the leader services of the node's replicated shards
// (leaderServices) until the returned stop, which waits for them; call
// it before the host stops. Until the node's replicas run no lease
// begins.
func (p *shardRuntime) lead(ctx context.Context) (stop func()) {
	p.replicas.leading.Start(ctx, p.leadShard)
	return p.replicas.leading.Stop
}

// leadShard runs shard n's leader services while this node's replica
// holds the group's lease of term: until ctx ends (the runner's, when
// the lease ended) or the lease does. A lease that ended before it
// began here is passed over: the next one is told.
func (p *shardRuntime) leadShard(ctx context.Context, n int, term uint64) {
	coord := p.replicas.host.RetentionCoordinator(uint64(n), p.cfg.NodeID)
	l, err := coord.Acquire(ctx)
	if err != nil {
		return
	}
	defer func() { _ = l.Release() }()
	if l.Info().Epoch != int64(term) {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-l.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	st, ok := p.shards.Store(n)
	if !ok {
		return
	}
	blobs, _ := p.shards.Blobs(n)
	svc, err := p.retention(ctx, n, st, blobs, coord, false)
	if err != nil {
		// Tried again at the next lease, not in a loop in this one.
		p.logger.Error("retention_start_failed", "shard", n, "term", term, "err", err)
		return
	}
	p.services.add(n, svc)
	hold := leaderHold{runs: svc, host: p.replicas.host, n: n, st: st}
	if err := p.backups.add(n, st, blobs, hold, p.smetrics.backups(n)); err != nil {
		p.logger.Error("backup_start_failed", "shard", n, "term", term, "err", err)
	}
	p.logger.Info("leader_services_started", "shard", n, "term", term)
	p.replicas.leading.mark(n, true)
	<-ctx.Done()
	p.replicas.leading.mark(n, false)
	p.detach(n)
	p.logger.Info("leader_services_stopped", "shard", n, "term", term)
}

// leaderHold holds a replicated shard for its leader's backup: its
// retention runs first (no run purges, and the manifest's audit head is
// the store's), then its group's apply, so that the checkpoint (and its
// key store's) is one applied state, as a snapshot's is. The runs are
// held first: a run's last writes need the group to apply them.
type leaderHold struct {
	runs backup.Holder
	host *replica.Host
	n    int
	st   *store.Store
}

func (h leaderHold) Hold(ctx context.Context) (audit.Head, func(), error) {
	head, release, err := h.runs.Hold(ctx)
	if err != nil {
		return head, nil, err
	}
	unhold, err := h.host.HoldApply(ctx, uint64(h.n), h.st)
	if err != nil {
		release()
		return audit.Head{}, nil, err
	}
	return head, func() {
		unhold()
		release()
	}, nil
}
