package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// shardEffects returns what gives a store of replicated shard n the
// Effects of every kind its commands carry, applied to this node's
// folders of the shard: the audit trail's steps to its trail
// (retention.TrailEffects), an attachment's bytes, their move into place
// and deletions to its file:// blob folder (attachments.ReplicaEffects),
// a change of a sealing shard's key store to its key store, which joins
// the group with secret, the replicated shards' secret.
// Every store the node opens for the shard's replica gets them before
// its group runs.
func shardEffects(cfg config.Config, n int, secret []byte, logger *slog.Logger) func(*store.Store) error {
	logger = logger.With("shard", n)
	trail := retention.TrailEffects(cluster.ShardAuditPath(cfg.Retention.AuditPath, n), logger)
	blobs := func(*store.Store) store.Effects {
		return func(context.Context, []byte) error {
			// The leader replicates bytes only into a file:// folder: the
			// nodes disagree on PROGRESSDB_ATTACHMENTS_URL.
			return fmt.Errorf("an attachment's bytes arrived, and this node's %s is not a file:// folder", config.VarAttachmentsURL)
		}
	}
	if dir := cluster.ShardAttachmentsDir(cfg.AttachmentsURL, n); dir != "" {
		blobs = func(st *store.Store) store.Effects {
			return attachments.ReplicaEffects(dir, func() uint64 { return replicaOf(st) }, logger)
		}
	}
	return func(st *store.Store) error {
		st.SetEffects(store.EffectTrail, trail)
		st.SetEffects(store.EffectBlobs, blobs(st))
		return replicateKeys(st, secret)
	}
}

// replicaOf is the replica ID st's log records (0: none).
func replicaOf(st *store.Store) uint64 {
	l, err := st.RaftLog(context.Background())
	if err != nil {
		return 0
	}
	return l.Replica()
}

// replicateKeys makes a sealing store's key store a replica of its
// group (keystore.ReplicateThrough): every change of a replicated
// shard's key store is a command of its group. A key store opened before
// the map asked for replicas (the home of a shard it grows into a group)
// joins the group with secret here; its author index stays as it is, and
// the other replicas receive it with their first snapshot.
func replicateKeys(st *store.Store, secret []byte) error {
	ks := KeyStore(st)
	if ks == nil {
		return nil
	}
	if secret == nil {
		return fmt.Errorf("a sealed shard's key store joins its group: %w: the cluster's replica secret was not read", keystore.ErrReplicated)
	}
	if err := ks.JoinGroup(secret); err != nil {
		return err
	}
	return ks.ReplicateThrough(st)
}
