package replica

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/durable"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// The prune of a snapshot's install (docs/replication-design.md §14):
// once the state is in place, the blobs no record of it names (purged
// while the replica was behind) leave the replica's folder of blobs,
// before the replica applies anything after the snapshot. A marker in
// the staged database names that folder: it takes the folder's place
// with the state at the swap's commit point, and goes once the prune is
// done, so that a crash in between leaves RecoverFolder the prune to
// finish on the state the snapshot installed.

// pruneMarker, in a database folder, names the folder of blobs a
// snapshot's prune still owes.
const pruneMarker = ".progressdb-snapshot-prune"

// owePrune records in the staged database dir that the folder of blobs
// blobs is to be pruned once dir's state is in place.
func owePrune(dir, blobs string) error {
	return durable.WriteFile(filepath.Join(dir, pruneMarker), []byte(blobs), 0o600)
}

// prunedDone removes dir's marker once its prune is done.
func prunedDone(dir string) error {
	if err := os.Remove(filepath.Join(dir, pruneMarker)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return durable.SyncDir(dir)
}

// finishPrune prunes the folder of blobs dir's marker names, by the
// records of the database at dir (not open: RecoverFolder's, before
// the store opens), and removes the marker; nothing without one.
func finishPrune(ctx context.Context, dir string) (int, error) {
	blobs, err := os.ReadFile(filepath.Join(dir, pruneMarker))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	named := map[string]bool{}
	if err := store.DirAttachments(ctx, dir, func(a store.Attachment) error {
		named[a.BlobName()] = true
		return nil
	}); err != nil {
		return 0, fmt.Errorf("the records of the snapshot's state: %w", err)
	}
	n, err := attachments.PruneBlobs(ctx, string(blobs), func(_ context.Context, tid, mid, aid string) (bool, error) {
		return named[store.BlobName(tid, mid, aid)], nil
	})
	if err != nil {
		return n, err
	}
	return n, prunedDone(dir)
}
