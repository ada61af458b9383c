package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/pkg/durable"
)

// A node that was away while its replica of a shard was removed from the
// group (replaced after PROGRESSDB_CLUSTER_DEAD_AFTER, or stopped between
// the removal and its learning of it) never applies the removal, and at
// its next start the map names no replica of the shard on it, so nothing
// opens the folder. Its files would keep content the other replicas
// purged since (spec §15: a removed replica's node erases its folder when
// it learns of the removal): they are deleted at start and by the
// reconciler. The shard's audit folder stays: it holds no content, and
// it is the proof of what was purged.

// Dropped lists the shards that are Raft groups (their set is not empty)
// whose set names no replica on node, not even a leaving one: whatever
// node keeps of them is left over from a removed replica. An owned
// shard (no set) is never listed: a move may still need its folder.
func (m Map) Dropped(node string) []int {
	var out []int
	for n, set := range m.Sets {
		if _, on := m.ReplicaOn(n, node); len(set) > 0 && !on {
			out = append(out, n)
		}
	}
	return out
}

// Leftovers are a node's folders of its shards, as Dropped decides which
// of them go.
type Leftovers struct {
	DBPath string
	// KeystorePath is PROGRESSDB_KEYSTORE_PATH ("": none), whose
	// shards/<n> folder is shard n's key store.
	KeystorePath string
	// AttachmentsURL is PROGRESSDB_ATTACHMENTS_URL: a file:// store's
	// shards/<n> folder holds shard n's blobs (a bucket's are shared,
	// and its own replicas' effects delete them).
	AttachmentsURL string
	Logger         *slog.Logger
}

// Delete deletes node's folders of the shards m.Dropped(node) lists but
// those keep reports (a group the node still runs: its retirement
// deletes its database folder first), each logged once as
// replica_folder_deleted. What is not on disk is passed over, so a
// second call finds nothing to do.
func (l Leftovers) Delete(m Map, node string, keep func(n int) bool) error {
	var errs []error
	for _, n := range m.Dropped(node) {
		if keep != nil && keep(n) {
			continue
		}
		db := ShardDBPath(l.DBPath, n)
		if replica.FolderOnDisk(db) {
			errs = append(errs, l.deleted(n, "database", db, replica.DeleteFolder(db)))
		}
		var ks string
		if l.KeystorePath != "" {
			ks = ShardKeystorePath(l.KeystorePath, n)
		}
		for _, f := range []struct{ what, dir string }{{"key store", ks}, {"attachments", ShardAttachmentsDir(l.AttachmentsURL, n)}} {
			if f.dir == "" {
				continue
			}
			if _, err := os.Lstat(f.dir); errors.Is(err, os.ErrNotExist) {
				continue
			}
			err := os.RemoveAll(f.dir)
			errs = append(errs, l.deleted(n, f.what, f.dir, errors.Join(err, durable.SyncDir(filepath.Dir(f.dir)))))
		}
	}
	return errors.Join(errs...)
}

// deleted logs the deletion of shard n's folder dir, or returns why it
// failed.
func (l Leftovers) deleted(n int, what, dir string, err error) error {
	if err != nil {
		return fmt.Errorf("shard %d: delete its %s folder left from a removed replica: %w", n, what, err)
	}
	logger := l.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.Info("replica_folder_deleted", slog.Int("shard", n), slog.String("what", what), slog.String("folder", dir))
	return nil
}
