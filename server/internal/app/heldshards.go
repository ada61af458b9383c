package app

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// ErrNodeRunning: a command that works on a node's shards found the node
// running; it holds them (and their key stores) itself.
var ErrNodeRunning = errors.New("the node is running")

// HeldShards are the shards of a cluster node reached by a command run
// in its place while it is stopped (`keys rotate-kek`, `keys
// encrypt-existing`, spec §11.1): the command registers as the node and
// owns its shards, so that each shard's work runs under the shard's
// ownership, fenced by its epoch, as the node's retention does. Close
// gives the ownerships and the registration up.
type HeldShards struct {
	cfg    config.Config
	client *clientv3.Client
	keys   cluster.Keys
	owner  *cluster.Owner
	held   []int
	key    ed25519.PrivateKey
	logger *slog.Logger
	blobs  []*attachments.Blobs // the runners' shards' blob stores, closed with h
}

// OpenHeldShards registers as the node cfg names and takes the
// ownership of the shards the map names it for. A process of the node
// still running (its registration renewed past twice the lease TTL) is
// ErrNodeRunning.
func OpenHeldShards(ctx context.Context, cfg config.Config, logger *slog.Logger) (*HeldShards, error) {
	key, err := SigningKey(cfg)
	if err != nil {
		return nil, err
	}
	client, err := EtcdClient(cfg.Cluster)
	if err != nil {
		return nil, err
	}
	h := &HeldShards{cfg: cfg, client: client, keys: cluster.Keys{Name: cfg.Cluster.ClusterName}, key: key, logger: logger}
	owner, err := cluster.StartOwner(ctx, cluster.OwnerOptions{Client: client, Keys: h.keys, Node: cfg.NodeID,
		URL:   cfg.AdvertiseURL,
		Owner: cfg.NodeID + "/" + hostname() + "/" + strconv.Itoa(os.Getpid()) + "/" + rand.Text()[:8],
		TTL:   cfg.Cluster.OwnerTTL, Logger: logger})
	if err != nil {
		_ = client.Close()
		if errors.Is(err, cluster.ErrNodeIDInUse) {
			return nil, fmt.Errorf("%w: node %s holds its shards; stop it first: %w", ErrNodeRunning, cfg.NodeID, err)
		}
		return nil, err
	}
	h.owner = owner
	m, err := cluster.ReadMap(ctx, client, h.keys)
	if err != nil {
		h.Close()
		return nil, err
	}
	if m.Replicated() {
		// Their writes are proposals to a running group: a stopped
		// node's shards cannot be worked on in its place.
		h.Close()
		return nil, fmt.Errorf("node %s: %w: its shards are replicas of Raft groups", cfg.NodeID, cluster.ErrReplicated)
	}
	h.held = m.HeldBy(cfg.NodeID)
	return h, nil
}

// Numbers lists the node's shards, in order.
func (h *HeldShards) Numbers() []int { return h.held }

// RewrapReceiptKey re-wraps the cluster's receipt key in etcd from the
// KEK from to the KEK to, once (keys rotate-kek, after the shards' key
// stores).
func (h *HeldShards) RewrapReceiptKey(ctx context.Context, from, to cluster.Wrapper) error {
	rewrapped, err := cluster.RewrapReceiptKey(ctx, h.client, h.keys, from, to)
	if err == nil {
		h.logger.Info("cluster_receipt_key_rewrapped", "rewrapped", rewrapped)
	}
	return err
}

// Runner waits until shard n is owned and returns a retention runner over
// st, its open store, and the shard's blob store, whose lease is the
// shard's ownership and whose writes carry its epoch, with the shard's
// audit folder and the cluster's pause switch.
func (h *HeldShards) Runner(ctx context.Context, n int, st *store.Store) (*retention.Runner, error) {
	if _, err := h.owner.WaitOwned(ctx, n, 0); err != nil {
		return nil, fmt.Errorf("shard %d: wait for its ownership: %w", n, err)
	}
	// A run it finishes deletes the blobs its purges owe, as every runner.
	blobs, err := OpenBlobs(ctx, h.cfg, cluster.ShardDBPath(h.cfg.DBPath, n))
	if err != nil {
		return nil, fmt.Errorf("shard %d: %w", n, err)
	}
	h.blobs = append(h.blobs, blobs)
	rc := h.cfg.Retention
	rc.AuditPath = cluster.ShardAuditPath(h.cfg.Retention.AuditPath, n)
	shard := n
	return retention.NewRunner(retention.RunnerOptions{Store: st, Config: rc, Logger: h.logger.With("shard", n),
		SigningKey: h.key, Coordinator: h.owner.Coordinator(n), Fenced: true, Shard: &shard, Blobs: blobs,
		Pause: &cluster.Pause{Client: h.client, Keys: h.keys}})
}

// Close releases the ownerships and the registration, and closes the
// runners' blob stores.
func (h *HeldShards) Close() {
	if h.owner != nil {
		h.owner.Close()
	}
	_ = h.client.Close()
	for _, b := range h.blobs {
		_ = b.Close()
	}
}

// ShardConfig is cfg as shard n of a cluster node sees it: its database,
// key store and audit folders (spec §11), so that a command working on
// one database works on the shard.
func ShardConfig(cfg config.Config, n int) config.Config {
	cfg = shardConfig(cfg, n)
	cfg.Retention.AuditPath = cluster.ShardAuditPath(cfg.Retention.AuditPath, n)
	return cfg
}
