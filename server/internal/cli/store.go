package cli

import (
	"errors"
	"fmt"
	"log/slog"

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
func openStore(cfg config.Config, logger *slog.Logger, mode openMode) (*store.Store, error) {
	st, err := store.Open(cfg.DBPath, store.Options{Logger: logger, MustExist: mode == mustExist})
	if errors.Is(err, store.ErrNoDatabase) {
		return nil, fmt.Errorf("%w at %s (%s): nothing was created; 'progressdb serve' creates one",
			store.ErrNoDatabase, cfg.DBPath, config.VarDBPath)
	}
	return st, err
}
