package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// openMode says whether a command may create the database.
type openMode bool

const (
	// mustExist: every command but serve and seed. A mistyped
	// PROGRESSDB_DB_PATH fails, naming the path, and leaves nothing on
	// disk, instead of answering from a new, empty database as if it were
	// a healthy one.
	mustExist openMode = false
	// mayCreate: seed, which fills a new database.
	mayCreate openMode = true
)

// openStore opens the database at PROGRESSDB_DB_PATH for a command; every
// command but serve (app.Serve) opens it here. A database a server holds gives an error wrapping
// store.ErrDatabaseLocked, a missing one (mustExist) store.ErrNoDatabase.
//
// With PROGRESSDB_KEK set it opens the key store too (spec §12), which
// the store closes with itself: what the command reads is opened and
// what it writes is sealed. The key store is opened second, so that a
// database a server holds is reported as held (the server holds its key
// store too).
func openStore(cfg config.Config, logger *slog.Logger, mode openMode) (*store.Store, error) {
	st, err := store.Open(cfg.DBPath, store.Options{Logger: logger, MustExist: mode == mustExist})
	if err == nil && cfg.KEK != "" {
		// Opened again with its key store: the first open proved the
		// database is there and free.
		if err = st.Close(); err != nil {
			return nil, err
		}
		ks, kerr := app.OpenKeyStore(context.Background(), cfg, logger)
		if kerr != nil {
			return nil, kerr
		}
		st, err = store.Open(cfg.DBPath, store.Options{Logger: logger, MustExist: mode == mustExist,
			Sealer: app.Sealer(ks), Closer: ks})
		if err != nil {
			_ = ks.Close()
		}
	}
	if errors.Is(err, store.ErrNoDatabase) {
		return nil, fmt.Errorf("%w at %s (%s): nothing was created; 'progressdb serve' creates one",
			store.ErrNoDatabase, cfg.DBPath, config.VarDBPath)
	}
	return st, err
}
