package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A replica's folder and its identity (docs/replication-design.md §8).
// Raft's safety assumes a voter never forgets what it acknowledged, so a
// replica runs only on the folder it started with: its store records its
// ID (store.RaftLog.Claim), and etcd records that it started
// (/<NAME>/replicas/started/<id>, put after the folder records the ID and
// before raft runs). A folder recording another ID is an earlier
// replica's and is deleted; an empty folder whose replica started before
// was lost, and that replica is replaced by one with a new ID on the
// same node, which the group's leader adds and catches up by snapshot.

// ErrReplicaLost: the replica's folder was lost (missing or empty while
// the replica had started): it must not run again under its ID.
var ErrReplicaLost = errors.New("the replica's folder was lost")

// ReplicaStarted is the key marking that replica id started: its folder
// may hold votes and acknowledged entries.
func (k Keys) ReplicaStarted(id uint64) string {
	return "/" + k.Name + "/replicas/started/" + strconv.FormatUint(id, 10)
}

// ReplicaFolder prepares what a node needs to start its replicas.
type ReplicaFolder struct {
	Client *clientv3.Client
	Keys   Keys
	Node   string
	Shards *Shards
	Logger *slog.Logger
}

// Prepare readies the node's folder of shard n for its replica r and
// returns the store to run it on. A folder recording another replica is
// deleted and opened empty; fresh: the folder is deleted and opened
// empty whatever it holds (a replica joining a running group). An empty
// folder of a replica that started before is lost: r is replaced in the
// shard's set by a replica with a new ID on this node (unless r is
// leaving anyway), and ErrReplicaLost is returned.
func (f ReplicaFolder) Prepare(ctx context.Context, n int, r Replica, fresh bool) (*store.Store, error) {
	st, ok := f.Shards.Store(n)
	var err error
	if !ok || fresh {
		st, err = f.reset(n)
	}
	if err != nil {
		return nil, err
	}
	log, err := st.RaftLog(ctx)
	if err != nil {
		return nil, err
	}
	if have := log.Replica(); have != 0 && have != r.ID {
		f.Logger.Warn("replica_folder_of_another_replica", slog.Int("shard", n), slog.Uint64("recorded", have),
			slog.Uint64("replica", r.ID))
		if st, err = f.reset(n); err != nil {
			return nil, err
		}
		if log, err = st.RaftLog(ctx); err != nil {
			return nil, err
		}
	}
	if log.Empty() {
		resp, err := f.Client.Get(ctx, f.Keys.ReplicaStarted(r.ID), clientv3.WithCountOnly())
		if err != nil {
			return nil, fmt.Errorf("shard %d: read replica %d's start: %w", n, r.ID, err)
		}
		if resp.Count > 0 {
			return nil, f.lost(ctx, n, r)
		}
	}
	if err := log.Claim(ctx, r.ID); err != nil {
		return nil, fmt.Errorf("shard %d: %w", n, err)
	}
	if _, err := f.Client.Put(ctx, f.Keys.ReplicaStarted(r.ID), f.Node); err != nil {
		return nil, fmt.Errorf("shard %d: record replica %d's start: %w", n, r.ID, err)
	}
	return st, nil
}

// reset deletes the node's folder of shard n and opens it empty.
func (f ReplicaFolder) reset(n int) (*store.Store, error) {
	if _, err := f.Shards.Detach(n); err != nil {
		return nil, err
	}
	if err := replica.DeleteFolder(ShardDBPath(f.Shards.DBPath(), n)); err != nil {
		return nil, fmt.Errorf("shard %d: delete the folder: %w", n, err)
	}
	// A sealed shard's keys go with its data: an empty database never
	// opens with another database's key store.
	if ks := f.Shards.KeystoreDir(n); ks != "" {
		if err := replica.DeleteFolder(ks); err != nil {
			return nil, fmt.Errorf("shard %d: delete the key store folder: %w", n, err)
		}
	}
	return f.Shards.Open(n)
}

// lost replaces replica r of shard n, whose folder was lost, by one on
// the same node, and returns ErrReplicaLost.
func (f ReplicaFolder) lost(ctx context.Context, n int, r Replica) error {
	if r.Leaving {
		f.Logger.Warn("replica_folder_lost", slog.Int("shard", n), slog.Uint64("replica", r.ID),
			slog.String("action", "none: it is leaving its set"))
		return fmt.Errorf("shard %d replica %d: %w", n, r.ID, ErrReplicaLost)
	}
	m, err := ReplaceLost(ctx, f.Client, f.Keys, n, f.Node, r.ID)
	if err != nil {
		return fmt.Errorf("shard %d replica %d: %w: %w", n, r.ID, ErrReplicaLost, err)
	}
	f.Logger.Warn("replica_folder_lost", slog.Int("shard", n), slog.Uint64("replica", r.ID),
		slog.String("action", "replaced on this node"), slog.Any("set", m.Sets[n]))
	return fmt.Errorf("shard %d replica %d: %w", n, r.ID, ErrReplicaLost)
}

// ReplaceLost replaces shard n's replica id on node, whose folder was
// lost, by a replica with a new ID on the same node: id is marked
// leaving and the new one added, whatever other change of the shard is
// under way (the group's leader takes both). Nothing changes when id is
// no staying replica of node any more.
func ReplaceLost(ctx context.Context, c *clientv3.Client, k Keys, n int, node string, id uint64) (Map, error) {
	m, err := changeMap(ctx, c, k, func(m *Map, newID func() uint64) (bool, error) {
		if n < 0 || n >= len(m.Sets) {
			return false, fmt.Errorf("%w: the cluster has shards 0 to %d", ErrMembershipChange, len(m.Sets)-1)
		}
		i := slices.IndexFunc(m.Sets[n], func(r Replica) bool { return r.ID == id && r.Node == node && !r.Leaving })
		if i < 0 {
			return false, nil
		}
		m.Sets[n][i].Leaving = true
		m.Sets[n] = append(m.Sets[n], Replica{ID: newID(), Node: node, Added: true})
		return true, nil
	})
	if err != nil {
		return Map{}, fmt.Errorf("replace shard %d's lost replica %d: %w", n, id, err)
	}
	return m, nil
}
