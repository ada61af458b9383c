package attachments

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/progressdb/progressdb/server/pkg/durable"
)

// A replica of a replicated shard that catches up by snapshot
// (docs/replication-design.md §14) gets the leader's blobs with the
// state: the snapshot's stream holds the blobs its records name, as
// stored, unpacked beside the replica's folder. They join the folder
// before the new state takes the database's place (AdoptBlobs), and once
// it has, the blobs no record of the new state names (purged while the
// replica was behind: their deletions were in the log it skipped) leave
// it (PruneBlobs).

// AdoptBlobs moves each blob unpacked in staged into the folder dir
// where it is missing (a blob's bytes never change once it is complete,
// so one already there is the same), syncs the folders, and removes
// staged. A blob moved in for a state that a crash then leaves
// uninstalled is named by no record yet: the next snapshot's prune, or
// the log's commit of its record, settles it.
func AdoptBlobs(staged, dir string) (int, error) {
	moved := 0
	err := filepath.WalkDir(staged, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == staged {
			return fs.SkipAll
		}
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(staged, p)
		if err != nil {
			return err
		}
		if _, _, _, leftover, ok := ObjectOf(filepath.ToSlash(rel)); !ok || leftover {
			return nil
		}
		to := filepath.Join(dir, rel)
		if _, err := os.Lstat(to); err == nil {
			return nil
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o750); err != nil {
			return err
		}
		if err := os.Rename(p, to); err != nil {
			return err
		}
		moved++
		return syncDirs(dir, filepath.Dir(to))
	})
	if err != nil {
		return moved, fmt.Errorf("adopt the snapshot's blobs: %w", err)
	}
	return moved, os.RemoveAll(staged)
}

// PruneBlobs deletes from the folder dir every blob whose attachment
// has no record (named says whether one names it) in the state a
// snapshot just installed: call it before the replica applies anything
// after the snapshot, when every blob of a record of that state is
// there or deleted later by the log. Uploads' temporary files stay (a
// chunk after the snapshot may add to one); the orphan sweep removes
// abandoned ones everywhere.
func PruneBlobs(ctx context.Context, dir string, named func(ctx context.Context, tid, mid, aid string) (bool, error)) (int, error) {
	pruned := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == dir {
			return fs.SkipAll
		}
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		tid, mid, aid, leftover, ok := ObjectOf(filepath.ToSlash(rel))
		if !ok || leftover || strings.HasPrefix(rel, "..") {
			return nil
		}
		has, err := named(ctx, tid, mid, aid)
		if err != nil || has {
			return err
		}
		if err := os.Remove(p); err != nil {
			return err
		}
		pruned++
		return durable.SyncDir(filepath.Dir(p))
	})
	if err != nil {
		return pruned, fmt.Errorf("prune blobs purged before a snapshot: %w", err)
	}
	return pruned, nil
}
