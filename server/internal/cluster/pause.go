package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// RetentionPause is the key of the cluster's retention pause switch.
func (k Keys) RetentionPause() string { return "/" + k.Name + "/retention/pause" }

// Pause defaults.
const (
	// DefaultPauseMaxAge is how long a run going trusts its last read of
	// the switch between batches. Reading etcd at every batch boundary
	// made purges several times slower; a pause set on another node stops
	// a run going within this much more.
	DefaultPauseMaxAge = 250 * time.Millisecond
	// pauseTimeout bounds one call to etcd when the caller's context does
	// not: a run must not hang at a batch boundary on an etcd out of reach.
	pauseTimeout = 5 * time.Second
)

// Pause is the cluster's retention pause switch (spec §11: pause is
// cluster-wide): one etcd key that every shard's runner reads before a run
// (Get, from etcd) and between its batches (GetAtBatch, a read at most
// MaxAge old), as a single node reads its database's. One Pause serves
// every shard of a node; use it by pointer.
type Pause struct {
	Client *clientv3.Client
	Keys   Keys
	Now    func() time.Time // paused_at; time.Now when nil
	// OnError, when set, sees every etcd call that failed
	// (progressdb_cluster_etcd_errors_total).
	OnError func(error)
	// MaxAge bounds how old a read GetAtBatch answers may be:
	// DefaultPauseMaxAge when 0, every call reads etcd when negative.
	MaxAge time.Duration

	mu     sync.Mutex
	last   store.RetentionPause
	lastEr error
	readAt time.Time // of last; zero: none
}

var (
	_ retention.PauseSwitch      = (*Pause)(nil)
	_ retention.BatchPauseSwitch = (*Pause)(nil)
)

func (p *Pause) failed(err error) {
	if p.OnError != nil && !errors.Is(err, context.Canceled) {
		p.OnError(err)
	}
}

// Get reads the switch from etcd; absent is not paused. An etcd that
// cannot be read, or a record that cannot be, counts as paused, with the
// error.
func (p *Pause) Get(ctx context.Context) (store.RetentionPause, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, _, err := p.read(ctx)
	return v, err
}

// GetAtBatch answers the last read when it is at most MaxAge old, and
// reads etcd otherwise.
func (p *Pause) GetAtBatch(ctx context.Context) (store.RetentionPause, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	maxAge := p.MaxAge
	if maxAge == 0 {
		maxAge = DefaultPauseMaxAge
	}
	if !p.readAt.IsZero() && time.Since(p.readAt) <= maxAge {
		return p.last, p.lastEr
	}
	v, _, err := p.read(ctx)
	return v, err
}

// read reads the switch and keeps it for GetAtBatch; p.mu is held.
func (p *Pause) read(ctx context.Context) (store.RetentionPause, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, pauseTimeout)
	defer cancel()
	v, rev, err := p.get(ctx)
	p.last, p.lastEr, p.readAt = v, err, time.Now()
	return v, rev, err
}

func (p *Pause) get(ctx context.Context) (store.RetentionPause, int64, error) {
	key := p.Keys.RetentionPause()
	resp, err := p.Client.Get(ctx, key)
	if err != nil {
		p.failed(err)
		return store.RetentionPause{Paused: true}, 0, fmt.Errorf("read retention pause: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return store.RetentionPause{}, 0, nil
	}
	var v store.RetentionPause
	if err := json.Unmarshal(resp.Kvs[0].Value, &v); err != nil {
		return store.RetentionPause{Paused: true}, resp.Kvs[0].ModRevision,
			fmt.Errorf("read retention pause: %s: %w: %w", key, store.ErrMalformed, err)
	}
	return v, resp.Kvs[0].ModRevision, nil
}

// Set pauses or resumes every shard's retention. A repeated pause keeps
// the first paused_at; the write is a compare-and-swap on what was read,
// so two operators' switches do not interleave.
func (p *Pause) Set(ctx context.Context, paused bool, reason string) (store.RetentionPause, error) {
	if len(reason) > store.MaxPauseReason {
		return store.RetentionPause{}, fmt.Errorf("%w: pause reason is %d bytes, longer than %d",
			store.ErrInvalidArgument, len(reason), store.MaxPauseReason)
	}
	now := p.Now
	if now == nil {
		now = time.Now
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, pauseTimeout)
	defer cancel()
	key := p.Keys.RetentionPause()
	for {
		cur, rev, err := p.get(ctx)
		if err != nil && rev == 0 {
			return store.RetentionPause{}, err // etcd unreadable; a malformed record is replaced
		}
		next := store.RetentionPause{}
		if paused {
			next = store.RetentionPause{Paused: true, Reason: reason, PausedAt: now().UnixNano()}
			if err == nil && cur.Paused && cur.PausedAt > 0 {
				next.PausedAt = cur.PausedAt
			}
		}
		v, err := json.Marshal(next)
		if err != nil {
			return store.RetentionPause{}, fmt.Errorf("write retention pause: %w", err)
		}
		resp, err := p.Client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, string(v))).
			Commit()
		if err != nil {
			p.failed(err)
			return store.RetentionPause{}, fmt.Errorf("write retention pause: %w", err)
		}
		if resp.Succeeded {
			// This node's runs see their own node's switch at once.
			p.last, p.lastEr, p.readAt = next, nil, time.Now()
			return next, nil
		}
	}
}
