package keystore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// checkpointPrefix names a backup's staging copy of the key store, inside
// the key store's folder: on its file system, so tables are hard-linked,
// and never inside the data folder, whose copies must carry no key.
const checkpointPrefix = ".backup-checkpoint-"

// Checkpoint copies the key store as it is now (every wrapped key, log
// synced first) into a new staging folder inside it, named by name, and
// returns the folder. A backup takes it while no retention run destroys
// keys, reads its files, and removes it (RemoveCheckpoint) before a run
// may destroy any: hard links left behind would keep a destroyed key's
// table on disk after the next erase. Open removes one a killed process
// left.
func (ks *KeyStore) Checkpoint(ctx context.Context, name string) (string, error) {
	if err := ks.live(ctx); err != nil {
		return "", err
	}
	if name == "" || strings.ContainsAny(name, `/\`) {
		return "", fmt.Errorf("key store checkpoint: bad name %q", name)
	}
	dir := filepath.Join(ks.path, checkpointPrefix+name)
	if err := ks.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("key store checkpoint: %w", err)
	}
	return dir, nil
}

// RemoveCheckpoint removes a staging folder made by Checkpoint.
func (ks *KeyStore) RemoveCheckpoint(dir string) error {
	if filepath.Dir(dir) != filepath.Clean(ks.path) || !strings.HasPrefix(filepath.Base(dir), checkpointPrefix) {
		return fmt.Errorf("key store: %s is not a checkpoint of %s", dir, ks.path)
	}
	return os.RemoveAll(dir)
}

// hasCheckpoints reports whether a backup's staging copy is in the key
// store's folder; a folder that cannot be listed counts as holding one.
func hasCheckpoints(path string) bool {
	entries, err := os.ReadDir(path)
	if err != nil {
		return true
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), checkpointPrefix) {
			return true
		}
	}
	return false
}

// removeStaleCheckpoints removes the staging folders a killed backup left.
func removeStaleCheckpoints(path string) error {
	entries, err := os.ReadDir(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), checkpointPrefix) {
			errs = append(errs, os.RemoveAll(filepath.Join(path, e.Name())))
		}
	}
	return errors.Join(errs...)
}
