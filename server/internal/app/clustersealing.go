package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	clientv3 "go.etcd.io/etcd/client/v3"
	"gocloud.dev/secrets"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// shardConfig is cfg as shard n sees it: its database, key store and
// attachments store (spec §11.1, §16), so that opening a shard is opening
// one database and what refuses it names the shard's folders. An
// attachments URL that does not parse (config refused it already) stays
// as it is.
func shardConfig(cfg config.Config, n int) config.Config {
	cfg.DBPath = cluster.ShardDBPath(cfg.DBPath, n)
	if cfg.KeystorePath != "" {
		cfg.KeystorePath = cluster.ShardKeystorePath(cfg.KeystorePath, n)
	}
	if u, err := cluster.ShardAttachmentsURL(cfg.AttachmentsURL, n); err == nil {
		cfg.AttachmentsURL = u
	}
	return cfg
}

// ClusterReceiptKey is the cluster's receipt key (spec §11.1), created in
// etcd on the first call with a KEK (cluster create, or a node's first
// start with one); nil without PROGRESSDB_KEK. A key in etcd that this
// KEK does not open is a *StartupError naming PROGRESSDB_KEK: every node
// must have the same one.
func ClusterReceiptKey(ctx context.Context, cfg config.Config, client *clientv3.Client, keys cluster.Keys) ([]byte, error) {
	return clusterSecret(ctx, cfg, keys, func(ctx context.Context, keeper *secrets.Keeper) ([]byte, error) {
		return cluster.EnsureReceiptKey(ctx, client, keys, keeper)
	})
}

// clusterSecret reads (or creates) a secret the cluster keeps in etcd
// wrapped by the KEK, with ensure; nil without PROGRESSDB_KEK. A KEK that
// does not open it is a *StartupError naming PROGRESSDB_KEK.
func clusterSecret(ctx context.Context, cfg config.Config, keys cluster.Keys, ensure func(context.Context, *secrets.Keeper) ([]byte, error)) ([]byte, error) {
	if cfg.KEK == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, etcdDialTimeout)
	defer cancel()
	keeper, err := keystore.OpenKEK(ctx, cfg.KEK)
	if err != nil {
		return nil, &StartupError{Var: config.VarKEK, Value: "<redacted>", Rule: "must be a usable KEK URL", Err: err}
	}
	defer keeper.Close()
	secret, err := ensure(ctx, keeper)
	if errors.Is(err, cluster.ErrReceiptKey) {
		return nil, &StartupError{Var: config.VarKEK, Value: "<redacted>",
			Rule: fmt.Sprintf("must be the KEK of cluster %q, the same on every node", keys.Name), Err: err}
	}
	return secret, err
}

// clusterSecrets are the secrets a sealed cluster's shards share, kept
// in etcd wrapped by the KEK; nil without PROGRESSDB_KEK.
type clusterSecrets struct {
	// receipt is the cluster's receipt key (ClusterReceiptKey).
	receipt []byte
	// replica is the replicated shards' secret (ClusterReplicaSecret);
	// nil when the shards are not replicated.
	replica []byte
}

// loadClusterSecrets reads (or creates) the cluster's secrets in etcd:
// none without PROGRESSDB_KEK, the replica secret only on a cluster of
// replicated shards.
func loadClusterSecrets(ctx context.Context, cfg config.Config, client *clientv3.Client, keys cluster.Keys, m cluster.Map) (clusterSecrets, error) {
	receipt, err := ClusterReceiptKey(ctx, cfg, client, keys)
	if err != nil {
		return clusterSecrets{}, err
	}
	replica, err := ClusterReplicaSecret(ctx, cfg, client, keys, m)
	return clusterSecrets{receipt: receipt, replica: replica}, err
}

// ClusterReplicaSecret is the secret every replica of a sealed
// replicated cluster's shards derives its key store's author index key
// and the seal of its key-store commands from
// (cluster.EnsureReplicaSecret); nil without PROGRESSDB_KEK or on a
// cluster whose shards have one copy each. A secret this KEK does not
// open is a *StartupError naming PROGRESSDB_KEK.
func ClusterReplicaSecret(ctx context.Context, cfg config.Config, client *clientv3.Client, keys cluster.Keys, m cluster.Map) ([]byte, error) {
	if !m.Replicated() {
		return nil, nil
	}
	return clusterSecret(ctx, cfg, keys, func(ctx context.Context, keeper *secrets.Keeper) ([]byte, error) {
		return cluster.EnsureReplicaSecret(ctx, client, keys, keeper)
	})
}

// openClusterShards opens the shards ns a node holds, each with its own
// key store at <KEYSTORE_PATH>/shards/<n> as OpenStore opens one database's
// (a shard not sealed yet is sealed when a KEK is set), all sharing the
// cluster's secrets, and each with its own attachments store
// (cluster.ShardAttachmentsURL). What must not open is a *StartupError
// naming the variable and the shard's folders, as on one node.
func openClusterShards(ctx context.Context, cfg config.Config, logger *slog.Logger, ns []int, secrets clusterSecrets) (*cluster.Shards, error) {
	sealers := func(n int) func(context.Context, store.SealState) (store.Sealer, io.Closer, error) {
		return sealerOpener(shardConfig(cfg, n), logger, MaySeal, secrets)
	}
	var blobs cluster.BlobsFor // none without a URL (config always sets one)
	if cfg.AttachmentsURL != "" {
		blobs = shardBlobs(ctx, cfg)
	}
	var keys []cluster.KeystorePath // a sealing node's snapshots replace them
	if cfg.KEK != "" && cfg.KeystorePath != "" {
		keys = append(keys, cluster.KeystorePath(cfg.KeystorePath))
	}
	shards, err := cluster.OpenShards(cfg.DBPath, ns, store.Options{Logger: logger}, sealers, blobs, keys...)
	var se *cluster.ShardError
	if errors.As(err, &se) {
		return nil, openError(shardConfig(cfg, se.Shard), err)
	}
	return shards, err
}

// shardBlobs opens each shard's attachments store (OpenBlobs: within
// the node's store, cluster.ShardAttachmentsURL).
func shardBlobs(ctx context.Context, cfg config.Config) cluster.BlobsFor {
	return func(n int) (*attachments.Blobs, error) {
		return OpenBlobs(ctx, cfg, cluster.ShardDBPath(cfg.DBPath, n))
	}
}
