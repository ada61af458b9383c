package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// RetentionPause is the key of the cluster's retention pause switch.
func (k Keys) RetentionPause() string { return "/" + k.Name + "/retention/pause" }

// Pause is the cluster's retention pause switch (spec §11: pause is
// cluster-wide): one etcd key that every shard's runner reads before a
// run and at every batch boundary, as a single node reads its database's.
type Pause struct {
	Client *clientv3.Client
	Keys   Keys
	Now    func() time.Time // time.Now when nil
	// OnError, when set, sees every etcd call that failed
	// (progressdb_cluster_etcd_errors_total).
	OnError func(error)
}

func (p Pause) failed(err error) {
	if p.OnError != nil && !errors.Is(err, context.Canceled) {
		p.OnError(err)
	}
}

var _ retention.PauseSwitch = Pause{}

// Get reads the switch; absent is not paused. An etcd that cannot be read,
// or a record that cannot be, counts as paused, with the error.
func (p Pause) Get(ctx context.Context) (store.RetentionPause, error) {
	v, _, err := p.get(ctx)
	return v, err
}

func (p Pause) get(ctx context.Context) (store.RetentionPause, int64, error) {
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
func (p Pause) Set(ctx context.Context, paused bool, reason string) (store.RetentionPause, error) {
	if len(reason) > store.MaxPauseReason {
		return store.RetentionPause{}, fmt.Errorf("%w: pause reason is %d bytes, longer than %d",
			store.ErrInvalidArgument, len(reason), store.MaxPauseReason)
	}
	now := p.Now
	if now == nil {
		now = time.Now
	}
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
			return next, nil
		}
	}
}
