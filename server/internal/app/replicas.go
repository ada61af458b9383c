package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/replica/raftnet"
	"github.com/progressdb/progressdb/server/internal/router"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// replicaRuntime runs a node's replicas of a cluster's Raft groups
// (spec §15, docs/replication-design.md §3, §6, §9): one replica.Host
// holding a group per shard the map names the node for, its messages
// carried by the raftnet transport over the node listener, and the
// groups' leaderships published in etcd for routing. It is the router's
// Replicas. Every cluster node has one; it runs once the map is
// replicated, from the start or from the `cluster set-replicas` that
// asks for replicas (watch), and then also switches the shards the node
// owns into groups (cluster.Grower).
type replicaRuntime struct {
	o       replicaOptions
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
	// grower switches this node's owned shards into groups; set by
	// watch, before the runtime runs.
	grower    *cluster.Grower
	activated sync.Once
	// folders prepares the folders the replicas run on.
	folders cluster.ReplicaFolder
	// secret is the replicated shards' secret on a sealing node
	// (ClusterReplicaSecret), read by run before any group starts: a
	// store the node opened before its map asked for replicas joins its
	// group with it (replicateKeys).
	secret []byte
}

var _ router.Replicas = (*replicaRuntime)(nil)

// replicaOptions are what newReplicas needs of the node.
type replicaOptions struct {
	cfg     config.Config
	client  *clientv3.Client
	keys    cluster.Keys
	shards  *cluster.Shards
	view    *router.View
	tls     *tls.Config // the node's client side of mutual TLS; nil: plain
	reg     prometheus.Registerer
	logger  *slog.Logger
	onError func(error) // etcd errors, counted
	// secrets are the cluster's as read at start: a snapshot's key store
	// opens with their receipt key (the replica secret is the runtime's).
	secrets clusterSecrets
}

// newReplicas builds the node's replica runtime; run (or watch) starts
// it.
func newReplicas(o replicaOptions) (*replicaRuntime, error) {
	leaders, err := cluster.NewLeaders(cluster.LeadersOptions{Client: o.client, Keys: o.keys, Node: o.cfg.NodeID,
		TTL: o.cfg.Cluster.OwnerTTL, Logger: o.logger, OnEtcdError: o.onError})
	if err != nil {
		return nil, err
	}
	view := o.view
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
	// The leader services follow the leases from the host's start on;
	// they run once the node's shards' runtime exists (shardRuntime.lead).
	rr := &replicaRuntime{o: o, net: net, leaders: leaders, leading: newLeaderServices(), logger: o.logger,
		folders: cluster.ReplicaFolder{Client: o.client, Keys: o.keys, Node: o.cfg.NodeID, Shards: o.shards, Logger: o.logger}}
	rr.progress, err = cluster.NewProgressReporter(cluster.ProgressOptions{Client: o.client, Keys: o.keys, Node: o.cfg.NodeID,
		TTL: o.cfg.Cluster.OwnerTTL, Statuses: func() []replica.GroupStatus { return rr.host.Statuses() },
		Logger: o.logger, OnEtcdError: o.onError})
	if err != nil {
		return nil, err
	}
	rr.host, err = replica.NewHost(replica.Config{Transport: net, Logger: o.logger, Registerer: o.reg,
		OnLeadership: func(l replica.Leadership) {
			if l.Leading() {
				leaders.Lead(int(l.Group), l.Term, l.Replica)
			} else {
				leaders.StepDown(int(l.Group))
			}
			rr.progress.Kick() // cluster status shows the new roles soon
		},
		OnLease: rr.leading.tell})
	if err != nil {
		return nil, err
	}
	// The groups this node leads follow the shard map's sets (moves,
	// set-replicas, dead nodes' replicas), replicas added here join, the
	// shards it owns become groups when the map asks for replicas, and its
	// folders of groups it left go.
	leftovers := leftoverFolders(o.cfg, o.logger)
	rr.rec = cluster.NewReconciler(cluster.ReconcilerOptions{Client: o.client, Keys: o.keys, Host: rr.host, Node: o.cfg.NodeID,
		DeadAfter: o.cfg.Cluster.DeadAfter, Logger: o.logger,
		Join: func(ctx context.Context, n int, r cluster.Replica) error {
			fx := rr.effects(n)
			return joinReplica(ctx, rr.host, rr.folders, n, r, fx, rr.shardFolder(n, fx))
		},
		Grow: func(ctx context.Context, m cluster.Map, n int) error {
			if rr.grower == nil {
				return nil
			}
			return rr.grower.Step(ctx, m, n)
		},
		// A shard still open here is being retired: its host deletes
		// the database folder once it closed it.
		Leftovers: func(m cluster.Map) error {
			return leftovers.Delete(m, o.cfg.NodeID, func(n int) bool {
				_, open := o.shards.Store(n)
				return open || rr.running(n)
			})
		}})
	return rr, nil
}

// effects sets shard n's command effects on a store: every replica
// writes the shard's audit trail and attachments' blob folder from the
// log, from the first command it applies.
func (r *replicaRuntime) effects(n int) func(*store.Store) error {
	return shardEffects(r.o.cfg, n, r.secret, r.logger)
}

// trail is shard n's audit trail on this node, which a snapshot replaces
// with the leader's.
func (r *replicaRuntime) trail(n int) string {
	return cluster.ShardAuditPath(r.o.cfg.Retention.AuditPath, n)
}

// watch runs the runtime at once when m, the map the node started with,
// is replicated: the groups run before any request. Otherwise it runs
// it once the map asks for replicas (cluster set-replicas), until ctx
// ends. From then on the shards per owns become groups.
func (r *replicaRuntime) watch(ctx context.Context, m cluster.Map, per *shardRuntime) error {
	r.grower = cluster.NewGrower(cluster.GrowerOptions{Client: r.o.client, Keys: r.o.keys, Node: r.o.cfg.NodeID,
		Owner: per.owner, Shards: r.o.shards, Holder: per.holder, Detach: per.detach, Start: r.startGroup,
		Running: r.running, Logger: r.logger})
	if m.Replicated() {
		return r.run(ctx, m)
	}
	go func() {
		for ctx.Err() == nil {
			m, err := cluster.WaitReplicated(ctx, r.o.client, r.o.keys)
			if err == nil {
				err = r.run(ctx, m)
			}
			if err == nil || ctx.Err() != nil {
				return
			}
			r.logger.Error("replicas_start_failed", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return nil
}

// run starts a group for every shard the map m names this node a
// replica of, over the shard's open store (a new store is bootstrapped
// with the shard's first voters, an existing one goes on from its log;
// from then on its writes are proposals), then the transport, the host,
// the leader records, the progress reports and the reconciler.
func (r *replicaRuntime) run(ctx context.Context, m cluster.Map) error {
	secret, err := ClusterReplicaSecret(ctx, r.o.cfg, r.o.client, r.o.keys, m)
	if err != nil {
		return err
	}
	r.activated.Do(func() {
		r.secret = secret
		for _, n := range r.o.shards.Numbers() {
			rp, ok := m.ReplicaOn(n, r.o.cfg.NodeID)
			if !ok {
				continue
			}
			err = r.startGroup(ctx, n, rp, m.Voters(n))
			if errors.Is(err, cluster.ErrReplicaLost) {
				// Replaced on this node: the new one joins through the
				// reconciler.
				err = nil
				continue
			}
			if err != nil {
				err = fmt.Errorf("shard %d: %w", n, err)
				return
			}
		}
		r.leaders.Start(ctx)
		r.net.Start(ctx, r.host)
		r.host.Start(ctx)
		r.progress.Start(ctx)
		r.rec.Start(ctx)
		r.logger.Info("replicas_started")
	})
	return err
}

// startGroup starts this node's replica rp of shard n over the shard's
// open store: a new log is bootstrapped with voters, the shard's first
// voters, unless rp joined a running group.
// Its folder is prepared first (cluster.ReplicaFolder): a folder of
// another replica deleted, one lost replaced (ErrReplicaLost).
func (r *replicaRuntime) startGroup(ctx context.Context, n int, rp cluster.Replica, voters []uint64) error {
	st, err := r.folders.Prepare(ctx, n, rp, false)
	if err != nil {
		return err
	}
	fx := r.effects(n)
	if err := fx(st); err != nil {
		return err
	}
	return r.host.AddGroup(ctx, replica.GroupConfig{Group: uint64(n), Replica: rp.ID, Peers: voters, Join: rp.Added,
		Store: st, Folder: r.shardFolder(n, fx)})
}

// running reports whether the host runs a group of shard n.
func (r *replicaRuntime) running(n int) bool {
	_, _, err := r.host.Members(uint64(n))
	return !errors.Is(err, replica.ErrNoGroup)
}

// leftoverFolders are the node's shard folders as cluster.Leftovers
// deletes those of the groups it holds no replica of.
func leftoverFolders(cfg config.Config, logger *slog.Logger) cluster.Leftovers {
	return cluster.Leftovers{DBPath: cfg.DBPath, KeystorePath: cfg.KeystorePath, AttachmentsURL: cfg.AttachmentsURL,
		Logger: logger}
}

// deleteLeftovers deletes, at a node's start, its folders of the groups
// whose sets name no replica on it (removed while it was away), before
// it opens or reports any folder. A folder that does not go is logged,
// and the reconciler tries again.
func deleteLeftovers(cfg config.Config, m cluster.Map, logger *slog.Logger) {
	if err := leftoverFolders(cfg, logger).Delete(m, cfg.NodeID, nil); err != nil {
		logger.Error("replica_folder_not_deleted", slog.Any("err", err))
	}
}

// joinReplica starts this node's replica r of shard n, added to the
// shard's set while the node runs: an empty folder whose group waits for
// its leader's snapshot. A folder an earlier replica of the shard left
// here goes first: a replica comes back with a new ID and nothing of the
// old one.
func joinReplica(ctx context.Context, host *replica.Host, folders cluster.ReplicaFolder, n int, r cluster.Replica, fx func(*store.Store) error,
	folder *replica.Folder) error {
	st, err := folders.Prepare(ctx, n, r, true)
	if err != nil {
		return err
	}
	if err := fx(st); err != nil {
		_, derr := folders.Shards.Detach(n)
		return errors.Join(err, derr)
	}
	gc := replica.GroupConfig{Group: uint64(n), Replica: r.ID, Join: true, Store: st, Folder: folder}
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
	r.activated.Do(func() {}) // never run after a stop
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
// the node's shards, and the restored one takes its place there; the
// shard's audit trail and a sealing node's key store of the shard are
// replaced with it, and a file:// store's folder of the shard's blobs
// goes with it.
func (r *replicaRuntime) shardFolder(n int, fx func(*store.Store) error) *replica.Folder {
	o, trail := r.o, r.trail(n)
	// The replica secret is the runtime's, read when it ran: a node
	// whose shards grew into groups after it started has none in o.
	secrets := clusterSecrets{receipt: o.secrets.receipt, replica: r.secret}
	shards := o.shards
	dir := cluster.ShardDBPath(shards.DBPath(), n)
	blobs := ""
	if b, ok := shards.Blobs(n); ok && b != nil {
		blobs = b.Dir()
	}
	keys := shards.KeystoreDir(n)
	return &replica.Folder{Dir: dir, Trail: trail, KeyStoreDir: keys, BlobsDir: blobs,
		Open: func(d string) (*store.Store, error) {
			if d == dir {
				st, err := shards.Open(n)
				if err == nil {
					err = fx(st) // the restored store applies the next commands
				}
				return st, err
			}
			// The unpacked state, opened only to adopt the snapshot's
			// log, with the key store unpacked beside its own folder.
			cfg := shardConfig(o.cfg, n)
			cfg.DBPath = d
			if keys != "" {
				cfg.KeystorePath = keys + replica.StagedSuffix
			}
			return store.Open(d, store.Options{Logger: o.logger, OpenSealer: sealerOpener(cfg, o.logger, KeepPlain, secrets)})
		},
		Close: func(*store.Store) error {
			_, err := shards.Detach(n)
			return err
		}}
}
