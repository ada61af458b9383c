package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Erasures implements api.Cluster: the erasure routes of a cluster node
// (spec §11.1). A node's call about one shard is answered by the shard's
// own erasure (the single node's); any other request by the cluster's,
// which records in etcd and asks every shard's owner. nil when sealing
// is off.
func (rt *Router) Erasures(r *http.Request) (retention.Erasures, error) {
	if rt.o.Erasures == nil {
		return nil, nil
	}
	n, isCall, err := rt.shardCall(r)
	if !isCall {
		return &clusterErasures{rt: rt, r: r}, nil
	}
	if err != nil {
		return nil, err
	}
	es, ok := rt.retentionOf(n).(retention.Erasures)
	if !ok {
		return nil, unavailable(n, "%v", errNoShardRetention)
	}
	return es, nil
}

// clusterErasures is a cluster's erasure as one request sees it: the
// shards' owners are asked with its credentials.
type clusterErasures struct {
	rt *Router
	r  *http.Request
}

var _ retention.Erasures = (*clusterErasures)(nil)

// Request records the erasure in etcd and answers: the owners run it.
func (c *clusterErasures) Request(ctx context.Context, author string) (retention.ErasureAccepted, error) {
	rec, err := c.rt.o.Erasures.Request(ctx, author)
	if err != nil {
		return retention.ErasureAccepted{}, err
	}
	return retention.ErasureAccepted{ErasureID: rec.ID}, nil
}

// Erasure aggregates every shard's part: from the record for the shards
// done, from their owners for the others (pending when a shard has none
// now, or its owner has not begun on it).
func (c *clusterErasures) Erasure(ctx context.Context, id string) (retention.ErasureStatus, error) {
	rec, err := c.read(ctx, id)
	if err != nil {
		return retention.ErasureStatus{}, err
	}
	live := make([]*retention.ErasureStatus, rec.Shards)
	if rec.Open() {
		_ = c.rt.eachShard(func(n int) error {
			if _, done := rec.Done[n]; done || n >= rec.Shards {
				return nil
			}
			st, err := c.shardStatus(ctx, n, id)
			switch {
			case err == nil:
				live[n] = &st
			case !errors.Is(err, store.ErrNotFound):
				c.rt.o.Logger.Debug("cluster_erasure_shard_unanswered", "erasure_id", id, "shard", n, "err", err)
			}
			return nil
		})
	}
	byShard := make(map[int]retention.ErasureStatus, len(live))
	for n, st := range live {
		if st != nil {
			byShard[n] = *st
		}
	}
	return rec.Status(byShard), nil
}

// read is erasure id's record: from etcd, or, once pruned there
// (cluster.DefaultErasureKeep after completion), rebuilt from the parts
// every shard keeps, as a single node keeps its erasures: an old ID
// answers as it did. store.ErrNotFound when no shard knows it; a shard
// whose owner does not answer fails the read rather than show a
// completed erasure as pending.
func (c *clusterErasures) read(ctx context.Context, id string) (cluster.ErasureRecord, error) {
	rec, err := c.rt.o.Erasures.Read(ctx, id)
	if !errors.Is(err, store.ErrNotFound) {
		return rec, err
	}
	shards := c.rt.o.View.Shards()
	parts := make([]*retention.ErasureStatus, shards)
	err = c.rt.eachShard(func(n int) error {
		st, err := c.shardStatus(ctx, n, id)
		switch {
		case err == nil:
			parts[n] = &st
		case !errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("erasure %s: shard %d: %w", id, n, err)
		}
		return nil
	})
	if err != nil {
		return cluster.ErasureRecord{}, err
	}
	byShard := make(map[int]retention.ErasureStatus, shards)
	for n, st := range parts {
		if st != nil {
			byShard[n] = *st
		}
	}
	rec, known := cluster.RecordFromShards(id, shards, byShard)
	if !known {
		return rec, fmt.Errorf("erasure %s: %w", id, store.ErrNotFound)
	}
	return rec, nil
}

// shardStatus is shard n's part of erasure id, from its owner.
func (c *clusterErasures) shardStatus(ctx context.Context, n int, id string) (retention.ErasureStatus, error) {
	if es, ok := c.local(n); ok {
		return es.Erasure(ctx, id)
	}
	var st retention.ErasureStatus
	code, msg, err := c.rt.ask(ctx, c.r, n, http.MethodGet, "/admin/erasures/"+url.PathEscape(id), nil, &st, false)
	switch {
	case err != nil:
		return st, err
	case code == http.StatusNotFound:
		return st, store.ErrNotFound
	case code != http.StatusOK:
		return st, unavailable(n, "its owner answered %d: %s", code, msg)
	}
	return st, nil
}

// local is held shard n's own erasure, when this node serves it.
func (c *clusterErasures) local(n int) (retention.Erasures, bool) {
	if _, ok := c.rt.here(n); !ok {
		return nil, false
	}
	es, ok := c.rt.retentionOf(n).(retention.Erasures)
	return es, ok
}

// Receipt gathers every shard's receipt into one: its files named
// shards/<n>/… as they lie under the cluster's audit folders gathered in
// one folder, which `erasure verify --audit DIR` checks.
func (c *clusterErasures) Receipt(ctx context.Context, id string) (audit.Receipt, error) {
	rec, err := c.read(ctx, id)
	if err != nil {
		return audit.Receipt{}, err
	}
	st := rec.Status(nil)
	if rec.Open() {
		return audit.Receipt{}, fmt.Errorf("erasure %s is %s: %w", id, st.Status, retention.ErrErasureIncomplete)
	}
	parts := make([]audit.Receipt, rec.Shards)
	err = c.rt.eachShard(func(n int) error {
		if n >= rec.Shards {
			return nil
		}
		var err error
		parts[n], err = c.shardReceipt(ctx, n, id)
		return err
	})
	if err != nil {
		return audit.Receipt{}, err
	}
	out := audit.Receipt{Format: audit.ReceiptFormat, ErasureID: id, Subject: rec.Subject,
		RequestedAt: st.RequestedAt.Time, CompletedAt: st.CompletedAt.Time,
		Items: []audit.ReceiptItem{}, HeldThreads: []string{}, Audit: []audit.ReceiptFile{}}
	for n, p := range parts {
		out.Shards = append(out.Shards, audit.ReceiptShard{Shard: n, DatabaseID: p.DatabaseID})
		out.Items = append(out.Items, p.Items...)
		out.HeldThreads = append(out.HeldThreads, p.HeldThreads...)
		for _, f := range p.Audit {
			f.File = path.Join("shards", strconv.Itoa(n), f.File)
			out.Audit = append(out.Audit, f)
		}
	}
	return out, nil
}

// shardReceipt is shard n's receipt of erasure id, from its owner.
func (c *clusterErasures) shardReceipt(ctx context.Context, n int, id string) (audit.Receipt, error) {
	if es, ok := c.local(n); ok {
		rc, err := es.Receipt(ctx, id)
		if err != nil {
			return rc, fmt.Errorf("shard %d: %w", n, err)
		}
		return rc, nil
	}
	var rc audit.Receipt
	code, msg, err := c.rt.ask(ctx, c.r, n, http.MethodGet, "/admin/erasures/"+url.PathEscape(id)+"/receipt", nil, &rc, false)
	switch {
	case err != nil:
		return rc, err
	case code == http.StatusConflict && strings.Contains(msg, "PROGRESSDB_AUDIT_SIGNING_KEY"):
		return rc, fmt.Errorf("shard %d: %s: %w", n, msg, retention.ErrReceiptUnsigned)
	case code == http.StatusConflict:
		// Its own part is not completed there (a shard restored from a
		// copy older than the erasure: the worker runs it again).
		return rc, fmt.Errorf("shard %d: %s: %w", n, msg, retention.ErrErasureIncomplete)
	case code != http.StatusOK:
		return rc, unavailable(n, "its owner answered %d: %s", code, msg)
	}
	return rc, nil
}
