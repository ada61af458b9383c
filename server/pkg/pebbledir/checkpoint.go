package pebbledir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// checkpointPrefix names the staging folders of checkpoints inside the
// Pebble folder: on the same file system, so tables are hard-linked.
const checkpointPrefix = ".backup-checkpoint-"

// Sentinel errors of the checkpoint calls.
var (
	// ErrCheckpointName: a checkpoint's name is empty or holds a path
	// separator.
	ErrCheckpointName = errors.New("bad checkpoint name")
	// ErrNotCheckpoint: a folder RemoveCheckpoint was given is not a
	// staging folder of that Pebble folder.
	ErrNotCheckpoint = errors.New("not a checkpoint")
)

// Checkpoint writes a consistent copy of db, whose folder is dir (log
// synced first, so every write acknowledged before the call is in it),
// into a new staging folder inside dir named by name, and returns its
// path. Tables are hard-linked: they stay on disk while the staging
// folder does, whatever the database deletes, so the caller removes it
// (RemoveCheckpoint) as soon as it has opened its files.
func Checkpoint(db *pebble.DB, dir, name string) (string, error) {
	if name == "" || strings.ContainsAny(name, `/\`) {
		return "", fmt.Errorf("%w: %q", ErrCheckpointName, name)
	}
	staging := filepath.Join(dir, checkpointPrefix+name)
	if err := db.Checkpoint(staging, pebble.WithFlushedWAL()); err != nil {
		_ = os.RemoveAll(staging)
		return "", err
	}
	return staging, nil
}

// RemoveCheckpoint removes a staging folder Checkpoint made in dir.
func RemoveCheckpoint(dir, staging string) error {
	if filepath.Dir(staging) != filepath.Clean(dir) || !strings.HasPrefix(filepath.Base(staging), checkpointPrefix) {
		return fmt.Errorf("%w: %s is not a checkpoint of %s", ErrNotCheckpoint, staging, dir)
	}
	return os.RemoveAll(staging)
}

// Checkpoints lists the staging folders in dir (none when dir is not
// there). The folders themselves are the truth, not a count of the calls
// that made them: a caller may move one away (a restore drill's copy).
func Checkpoints(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), checkpointPrefix) {
			dirs = append(dirs, filepath.Join(dir, e.Name()))
		}
	}
	return dirs, nil
}

// HasCheckpoints reports whether a staging folder is in dir; a folder
// that cannot be listed counts as holding one, so that an erase claims
// "erased" only when nothing can be left.
func HasCheckpoints(dir string) bool {
	dirs, err := Checkpoints(dir)
	return err != nil || len(dirs) > 0
}

// RemoveStaleCheckpoints removes the staging folders a killed process
// left in dir: their hard links would keep deleted tables on disk. Only
// the process holding the folder's lock may call it: another one's
// backup may be reading its own.
func RemoveStaleCheckpoints(dir string) error {
	dirs, err := Checkpoints(dir)
	var errs []error
	for _, d := range dirs {
		errs = append(errs, os.RemoveAll(d))
	}
	return errors.Join(append(errs, err)...)
}
