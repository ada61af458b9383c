package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Stores is a database's store and its attachments' blob store (spec
// §16), opened together. The workflows that purge (retention runs,
// replays, erasures) or copy (backups) are built over both (NewRetention,
// NewBackups), so that none can leave the blobs out: a purge owes the
// deletion of its attachments' blobs, which only a runner holding the
// blob store does, and a backup copies them.
type Stores struct {
	Store *store.Store
	Blobs *attachments.Blobs
}

// OpenStores opens the database at PROGRESSDB_DB_PATH (OpenStore) and its
// blob store (OpenBlobs). Close closes both.
func OpenStores(ctx context.Context, cfg config.Config, logger *slog.Logger, opts store.Options, sealing Sealing) (Stores, error) {
	st, err := OpenStore(ctx, cfg, logger, opts, sealing)
	if err != nil {
		return Stores{}, err
	}
	s, err := WithBlobs(ctx, cfg, st)
	if err != nil {
		return Stores{}, errors.Join(err, st.Close())
	}
	return s, nil
}

// WithBlobs pairs st, the database at PROGRESSDB_DB_PATH opened already,
// with its blob store. Closing the pair closes st too.
func WithBlobs(ctx context.Context, cfg config.Config, st *store.Store) (Stores, error) {
	blobs, err := OpenBlobs(ctx, cfg, cfg.DBPath)
	if err != nil {
		return Stores{}, err
	}
	return Stores{Store: st, Blobs: blobs}, nil
}

// Close closes the blob store, then the store.
func (s Stores) Close() error {
	var err error
	if s.Blobs != nil {
		err = s.Blobs.Close()
	}
	if s.Store != nil {
		err = errors.Join(err, s.Store.Close())
	}
	return err
}

// OpenBlobs opens the blob store of the database at dbDir (BlobsURL): the
// one seam where a database's attachments store is chosen, for
// PROGRESSDB_DB_PATH and for any other database folder (a shard's).
func OpenBlobs(ctx context.Context, cfg config.Config, dbDir string) (*attachments.Blobs, error) {
	u, err := BlobsURL(cfg, dbDir)
	if err != nil {
		return nil, fmt.Errorf("the attachments store of %s: %w", dbDir, err)
	}
	blobs, err := attachments.Open(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("open the attachments store (%s): %w", config.VarAttachmentsURL, err)
	}
	return blobs, nil
}

// BlobsURL is the blob store URL of the database at dbDir:
// PROGRESSDB_ATTACHMENTS_URL, except that its default (the folder beside
// DB_PATH) becomes the folder beside dbDir, so that two databases never
// share a default folder; a cluster node's shard <DB_PATH>/shards/<n>
// has its own folder or prefix within the node's store
// (cluster.ShardAttachmentsURL), which moves with it.
func BlobsURL(cfg config.Config, dbDir string) (string, error) {
	if n, ok := cluster.ShardOfDBPath(cfg.DBPath, dbDir); ok {
		return cluster.ShardAttachmentsURL(cfg.AttachmentsURL, n)
	}
	def, err := config.FileURL(config.DefaultAttachmentsDir(cfg.DBPath))
	if err != nil || cfg.AttachmentsURL != def || filepath.Clean(dbDir) == filepath.Clean(cfg.DBPath) {
		return cfg.AttachmentsURL, nil
	}
	return config.FileURL(config.DefaultAttachmentsDir(dbDir))
}

// CopyBlobsURL is the blob store of a restored copy at dbDir: with a
// file:// store, the folder dir, or the folder beside dbDir when dir is
// "", never the original's folder (a copy never acts for the original,
// spec §10.1); a remote store is the original's, where a copy's blobs
// still are.
func CopyBlobsURL(cfg config.Config, dbDir, dir string) (string, error) {
	scheme, _, err := config.ParseAttachmentsURL(cfg.AttachmentsURL)
	if err != nil {
		return "", err
	}
	if scheme != "file" {
		return cfg.AttachmentsURL, nil
	}
	if dir == "" {
		dir = config.DefaultAttachmentsDir(dbDir)
	}
	return config.FileURL(dir)
}
