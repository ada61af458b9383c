package app

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/retention"
)

// startErasures starts a sealed node's part in the cluster's subject
// erasures (spec §11.1): the record any node's request writes in etcd
// (p.erasures, which the router serves), and the worker that has each
// shard this node owns (or, replicated, leads) run them. It starts
// nothing when sealing is off (no receipt key). The stop it returns ends the worker: deferred after
// the retention services' Close, it runs before it, since the worker
// starts their runs.
func (p *shardRuntime) startErasures(ctx context.Context, client *clientv3.Client, keys cluster.Keys, shards int) (stop func()) {
	if len(p.receiptKey) == 0 {
		return func() {}
	}
	services := p.services
	// A replicated shard's part runs on its leader.
	w := cluster.StartErasureWorker(ctx, cluster.ErasureWorkerOptions{Client: client, Keys: keys, Owner: p.owner,
		Leader:     p.replicas.leading,
		ReceiptKey: p.receiptKey, Logger: p.logger, OnEtcdError: p.cmetrics.EtcdError,
		Service: func(n int) retention.ShardEraser {
			if svc := services.get(n); svc != nil {
				return svc
			}
			return nil
		}})
	p.erasures = &cluster.Erasures{Client: client, Keys: keys, ReceiptKey: p.receiptKey, Shards: shards, Pause: p.pause}
	return w.Close
}
