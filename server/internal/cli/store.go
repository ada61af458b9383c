package cli

import (
	"context"
	"errors"
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
// command but serve (app.Serve) opens it here. A database a server holds
// gives an error wrapping store.ErrDatabaseLocked, a missing one
// (mustExist) store.ErrNoDatabase; what must not open (a sealed database
// without its KEK or key store, an unknown format) an *app.StartupError.
//
// A sealed database opens with its key store, which the store closes with
// itself: what the command reads is opened and what it writes is sealed.
// Only sealing commands (seal) seal a database that is not yet.
func openStore(cfg config.Config, logger *slog.Logger, mode openMode, sealing app.Sealing) (*store.Store, error) {
	return app.OpenStore(context.Background(), cfg, logger, store.Options{Logger: logger, MustExist: mode == mustExist}, sealing)
}

// openExit is the exit status of a failed open: 2 for what the
// configuration must change (*app.StartupError), 1 otherwise.
func openExit(err error) int {
	var se *app.StartupError
	if errors.As(err, &se) {
		return exitUsage
	}
	return exitFailed
}
