package app

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/retention"
)

// leaseRetry is how often a replica that does not lead its group asks
// again for the retention lease: a new leader's lease begins only once
// it applied an entry of its term, which nothing announces.
const leaseRetry = 250 * time.Millisecond

// leadRetention runs the retention service of every replicated shard
// this node holds a replica of, on the node while its replica leads the
// group (docs/replication-design.md §9): the service starts once the
// replica holds the group's lease (its leadership, with the term as the
// epoch) and stops when that term's lease ends, and starts again at the
// next leadership. Its writes are proposals in the term. Every shard is
// followed, not only those with a replica here at start: a move or a
// dead node's replacement adds replicas to a running node, and their
// leaderships must run retention too. The returned function stops every
// service and waits; call it before the host stops. Without replicas
// there is nothing to run.
func (p *shardRuntime) leadRetention(ctx context.Context) (stop func()) {
	if p.replicas == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for n := range p.cfg.Cluster.Shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.followLease(ctx, n)
		}()
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// followLease runs shard n's retention service through each of this
// replica's leaderships until ctx ends.
func (p *shardRuntime) followLease(ctx context.Context, n int) {
	coord := p.replicas.host.RetentionCoordinator(uint64(n), p.cfg.NodeID)
	for ctx.Err() == nil {
		l, err := coord.Acquire(ctx)
		if err != nil {
			// Another replica leads, or this node has no replica of the
			// shard (yet, or any more): both are waited out quietly.
			var held *retention.LeaseHeldError
			if !errors.As(err, &held) && !errors.Is(err, replica.ErrNoGroup) && ctx.Err() == nil {
				p.logger.Error("retention_lease_failed", "shard", n, "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(leaseRetry):
			}
			continue
		}
		p.serveTerm(ctx, n, l)
	}
}

// serveTerm runs shard n's retention service while l, this replica's
// lease of one term, lasts; the runs take the lease themselves.
func (p *shardRuntime) serveTerm(ctx context.Context, n int, l retention.HeldLease) {
	defer func() { _ = l.Release() }()
	term := l.Info().Epoch
	termCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-l.Done():
			cancel()
		case <-termCtx.Done():
		}
	}()
	st, ok := p.shards.Store(n)
	if !ok {
		<-termCtx.Done()
		return
	}
	blobs, _ := p.shards.Blobs(n)
	coord := p.replicas.host.RetentionCoordinator(uint64(n), p.cfg.NodeID)
	svc, err := p.retention(termCtx, n, st, blobs, coord, false)
	if err != nil {
		// Tried again at the next leadership, not in a loop in this one.
		p.logger.Error("retention_start_failed", "shard", n, "term", term, "err", err)
		<-termCtx.Done()
		return
	}
	p.services.add(n, svc)
	p.logger.Info("retention_leading", "shard", n, "term", term)
	<-termCtx.Done()
	if p.services.remove(n) == svc {
		svc.Close()
	}
	p.smetrics.remove(n)
	p.logger.Info("retention_stepped_down", "shard", n, "term", term)
}
