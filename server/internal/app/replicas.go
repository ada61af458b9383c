package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/replica/raftnet"
	"github.com/progressdb/progressdb/server/internal/router"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// replicaRuntime runs a node's replicas of a replicated cluster's shards
// (spec §15, docs/replication-design.md §3, §6, §9): one replica.Host
// holding a group per shard the map names the node for, its messages
// carried by the raftnet transport over the node listener, and the
// groups' leaderships published in etcd for routing. It is the router's
// Replicas.
type replicaRuntime struct {
	host    *replica.Host
	net     *raftnet.Transport
	leaders *cluster.Leaders
	// progress reports the groups' statuses in etcd, for cluster status.
	progress *cluster.ProgressReporter
	rec      *cluster.Reconciler
	// leading runs the services of the shards whose replica here leads.
	leading *leaderServices
	logger  *slog.Logger
	stopped sync.Once
	// shards are the shards this node runs a replica of.
	shards []int
}

var _ router.Replicas = (*replicaRuntime)(nil)

// replicaOptions are what startReplicas needs of the node.
type replicaOptions struct {
	cfg     config.Config
	client  *clientv3.Client
	keys    cluster.Keys
	m       cluster.Map
	shards  *cluster.Shards
	view    *router.View
	tls     *tls.Config // the node's client side of mutual TLS; nil: plain
	reg     prometheus.Registerer
	logger  *slog.Logger
	onError func(error) // etcd errors, counted
}

// checkReplicated refuses what replicated shards do not do yet: sealing
// (each replica's key store would hold other data keys than the
// leader's, whose sealed values it applies).
func checkReplicated(cfg config.Config, m cluster.Map) error {
	if m.Replicated() && cfg.KEK != "" {
		return &StartupError{Var: config.VarKEK, Value: "<redacted>",
			Rule: "must be unset on a cluster of replicated shards (cluster create --replicas): sealing them is not built yet"}
	}
	return nil
}

// startReplicas starts a group for every shard the map names this node
// a replica of, over the shard's open store: a new store is bootstrapped
// with the shard's replica set as its first voters, an existing one goes
// on from its log. From then on the stores' writes are proposals. nil
// when the shards are not replicated.
func startReplicas(ctx context.Context, o replicaOptions) (*replicaRuntime, error) {
	if !o.m.Replicated() {
		return nil, nil
	}
	leaders, err := cluster.NewLeaders(cluster.LeadersOptions{Client: o.client, Keys: o.keys, Node: o.cfg.NodeID,
		TTL: o.cfg.Cluster.OwnerTTL, Logger: o.logger, OnEtcdError: o.onError})
	if err != nil {
		return nil, err
	}
	m, view := o.m, o.view
	net, err := raftnet.New(raftnet.Options{Node: o.cfg.NodeID, Secret: o.cfg.Cluster.Secret, TLS: o.tls,
		Logger: o.logger, Metrics: raftnet.NewMetrics(o.reg),
		// A replica is found on its node, at the URL it registered.
		Resolve: func(id uint64) (raftnet.Peer, bool) {
			node, ok := view.ReplicaNode(id)
			if !ok {
				return raftnet.Peer{}, false
			}
			url, ok := view.NodeURL(node)
			return raftnet.Peer{Node: node, URL: url}, ok
		}})
	if err != nil {
		return nil, err
	}
	var host *replica.Host
	// The leader services follow the leases from the host's start on;
	// they run once the node's shards' runtime exists (shardRuntime.lead).
	leading := newLeaderServices()
	progress, err := cluster.NewProgressReporter(cluster.ProgressOptions{Client: o.client, Keys: o.keys, Node: o.cfg.NodeID,
		TTL: o.cfg.Cluster.OwnerTTL, Statuses: func() []replica.GroupStatus { return host.Statuses() },
		Logger: o.logger, OnEtcdError: o.onError})
	if err != nil {
		return nil, err
	}
	host, err = replica.NewHost(replica.Config{Transport: net, Logger: o.logger, Registerer: o.reg,
		OnLeadership: func(l replica.Leadership) {
			if l.Leading() {
				leaders.Lead(int(l.Group), l.Term, l.Replica)
			} else {
				leaders.StepDown(int(l.Group))
			}
			progress.Kick() // cluster status shows the new roles soon
		},
		OnLease: leading.tell})
	if err != nil {
		return nil, err
	}
	fxOf := func(n int) func(*store.Store) { return shardEffects(o.cfg, n, o.logger) }
	folders := cluster.ReplicaFolder{Client: o.client, Keys: o.keys, Node: o.cfg.NodeID, Shards: o.shards, Logger: o.logger}
	var groups []int
	for _, n := range o.shards.Numbers() {
		r, ok := m.ReplicaOn(n, o.cfg.NodeID)
		if !ok {
			continue
		}
		// A lost folder's replica is replaced on this node: the new one
		// joins through the reconciler.
		st, err := folders.Prepare(ctx, n, r, false)
		if errors.Is(err, cluster.ErrReplicaLost) {
			continue
		}
		if err != nil {
			return nil, err
		}
		// Every replica writes the shard's audit trail and attachments'
		// blob folder from the log, from the first command it applies.
		fx := fxOf(n)
		fx(st)
		gc := replica.GroupConfig{Group: uint64(n), Replica: r.ID, Peers: m.Voters(n), Join: r.Added, Store: st,
			Folder: shardFolder(o.shards, n, fx)}
		if err := host.AddGroup(ctx, gc); err != nil {
			return nil, fmt.Errorf("shard %d: %w", n, err)
		}
		groups = append(groups, n)
	}
	// The groups this node leads follow the shard map's sets (moves,
	// set-replicas, dead nodes' replicas), and replicas added here join.
	rec := cluster.NewReconciler(cluster.ReconcilerOptions{Client: o.client, Keys: o.keys, Host: host, Node: o.cfg.NodeID,
		DeadAfter: o.cfg.Cluster.DeadAfter, Logger: o.logger,
		Join: func(ctx context.Context, n int, r cluster.Replica) error {
			return joinReplica(ctx, host, folders, n, r, fxOf(n))
		}})
	rr := &replicaRuntime{host: host, net: net, leaders: leaders, progress: progress, rec: rec, leading: leading,
		logger: o.logger, shards: groups}
	leaders.Start(ctx)
	net.Start(ctx, host)
	host.Start(ctx)
	progress.Start(ctx)
	rec.Start(ctx)
	return rr, nil
}

// joinReplica starts this node's replica r of shard n, added to the
// shard's set while the node runs: an empty folder whose group waits for
// its leader's snapshot. A folder an earlier replica of the shard left
// here goes first: a replica comes back with a new ID and nothing of the
// old one.
func joinReplica(ctx context.Context, host *replica.Host, folders cluster.ReplicaFolder, n int, r cluster.Replica, fx func(*store.Store)) error {
	st, err := folders.Prepare(ctx, n, r, true)
	if err != nil {
		return err
	}
	fx(st)
	gc := replica.GroupConfig{Group: uint64(n), Replica: r.ID, Join: true, Store: st, Folder: shardFolder(folders.Shards, n, fx)}
	if err := host.AddGroup(ctx, gc); err != nil {
		_, derr := folders.Shards.Detach(n)
		return errors.Join(err, derr)
	}
	return nil
}

// stop stops the groups, then the streams, then ends the leader records'
// session, which deletes them at once so that the other nodes route to
// the next leaders. The stores stay open: the node closes them after.
// A nil runtime has nothing to stop.
func (r *replicaRuntime) stop() {
	if r == nil {
		return
	}
	r.stopped.Do(func() {
		r.rec.Stop()
		r.progress.Stop()
		r.host.Stop()
		r.net.Stop()
		r.leaders.Stop()
		r.logger.Info("replicas_stopped")
	})
}

// Lease implements router.Replicas.
func (r *replicaRuntime) Lease(n int) uint64 { return r.host.Lease(uint64(n)) }

// ReadIndex implements router.Replicas.
func (r *replicaRuntime) ReadIndex(ctx context.Context, n int) error {
	return r.host.ReadIndex(ctx, uint64(n))
}

// shardFolder is shard n's folder as its replica's snapshots see it
// (docs/replication-design.md §7): the store a snapshot replaces leaves
// the node's shards, and the restored one takes its place there; a
// file:// store's folder of the shard's blobs goes with it.
func shardFolder(shards *cluster.Shards, n int, fx func(*store.Store)) *replica.Folder {
	dir := cluster.ShardDBPath(shards.DBPath(), n)
	blobs := ""
	if b, ok := shards.Blobs(n); ok && b != nil {
		blobs = b.Dir()
	}
	return &replica.Folder{Dir: dir, BlobsDir: blobs,
		Open: func(d string) (*store.Store, error) {
			if d == dir {
				st, err := shards.Open(n)
				if err == nil {
					fx(st) // the restored store applies the next commands
				}
				return st, err
			}
			// The unpacked state, opened only to adopt the snapshot's log.
			return store.Open(d, store.Options{})
		},
		Close: func(*store.Store) error {
			_, err := shards.Detach(n)
			return err
		}}
}
