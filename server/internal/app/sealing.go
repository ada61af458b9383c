package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Sealing says whether opening a database may seal it (spec §12). A key
// store is created only together with the sealing of its database: by
// serve's first start with a KEK, `keys encrypt-existing`, seed and a
// restore. Every other command opens a database that is not sealed yet
// as it is, whatever PROGRESSDB_KEK says.
type Sealing bool

const (
	// MaySeal: with PROGRESSDB_KEK set, a database not sealed yet is
	// sealed (its key store created and bound to it).
	MaySeal Sealing = true
	// KeepPlain: a database not sealed yet stays so; a sealed one still
	// opens only with its KEK and key store.
	KeepPlain Sealing = false
)

// OpenStore opens the database at PROGRESSDB_DB_PATH with opts and, when
// it is sealed or sealing may seal it, its key store at
// PROGRESSDB_KEYSTORE_PATH with PROGRESSDB_KEK; the store closes the key
// store with itself. What must not open is a *StartupError (exit 2)
// naming the variable: a sealed database without PROGRESSDB_KEK, a key
// store missing, empty or another database's, a format this binary does
// not read. Other errors are the store's (ErrDatabaseLocked,
// ErrNoDatabase naming the path, ...), wrapped.
func OpenStore(ctx context.Context, cfg config.Config, logger *slog.Logger, opts store.Options, sealing Sealing) (*store.Store, error) {
	opts.OpenSealer = sealerOpener(cfg, logger, sealing, clusterSecrets{})
	st, err := store.Open(cfg.DBPath, opts)
	if err != nil {
		return nil, openError(cfg, err)
	}
	return st, nil
}

// sealerOpener is the store.Options.OpenSealer of the database at
// cfg.DBPath: its key store at cfg.KeystorePath with cfg.KEK when it is
// sealed or sealing may seal it. A cluster's secrets, when set, are used
// instead of the key store's own.
func sealerOpener(cfg config.Config, logger *slog.Logger, sealing Sealing,
	secrets clusterSecrets) func(context.Context, store.SealState) (store.Sealer, io.Closer, error) {
	return func(ctx context.Context, st store.SealState) (store.Sealer, io.Closer, error) {
		if cfg.KEK == "" || (!st.Sealed && sealing == KeepPlain) {
			return nil, nil, nil
		}
		ks, err := openKeyStore(ctx, cfg, logger, st, secrets)
		if err != nil {
			return nil, nil, err
		}
		return ks, ks, nil
	}
}

// openKeyStore opens the key store for a database in state st: only one
// that exists when the database is sealed, else creating it bound to the
// database.
func openKeyStore(ctx context.Context, cfg config.Config, logger *slog.Logger, st store.SealState,
	secrets clusterSecrets) (*keystore.KeyStore, error) {
	keeper, err := keystore.OpenKEK(ctx, cfg.KEK)
	if err != nil {
		return nil, &StartupError{Var: config.VarKEK, Value: "<redacted>", Rule: "must be a usable KEK URL", Err: err}
	}
	ks, err := keystore.Open(ctx, cfg.KeystorePath, keystore.Options{Keeper: keeper, DataPath: cfg.DBPath, Logger: logger,
		MustExist: st.Sealed, Database: st.DatabaseID, ReceiptKey: secrets.receipt, GroupSecret: secrets.replica})
	if err != nil {
		return nil, fmt.Errorf("open key store (%s=%s): %w", config.VarKeystorePath, cfg.KeystorePath, err)
	}
	return ks, nil
}

// openError turns what refuses a sealed database or an unknown format
// into a *StartupError naming the variable to set, and says what to do.
func openError(cfg config.Config, err error) error {
	var se *StartupError
	switch {
	case errors.As(err, &se):
		return err
	case errors.Is(err, store.ErrSealedNeedsKEK):
		return &StartupError{Var: config.VarKEK, Value: "", Err: err,
			Rule: fmt.Sprintf("must be set: the database at %s=%s is sealed; set it (and %s) to the KEK and key store it was sealed with",
				config.VarDBPath, cfg.DBPath, config.VarKeystorePath)}
	case errors.Is(err, keystore.ErrNoKeyStore):
		return &StartupError{Var: config.VarKeystorePath, Value: cfg.KeystorePath, Err: err,
			Rule: fmt.Sprintf("must be the key store of the sealed database at %s=%s (a volume not mounted? a path typo?); nothing was created",
				config.VarDBPath, cfg.DBPath)}
	case errors.Is(err, store.ErrForeignKeyStore):
		return &StartupError{Var: config.VarKeystorePath, Value: cfg.KeystorePath, Err: err,
			Rule: fmt.Sprintf("must be the key store of the database at %s=%s, not another database's", config.VarDBPath, cfg.DBPath)}
	case errors.Is(err, keystore.ErrInsideDataPath):
		return &StartupError{Var: config.VarKeystorePath, Value: cfg.KeystorePath,
			Rule: "must be outside " + config.VarDBPath, Err: err}
	case errors.Is(err, store.ErrUnknownFormat):
		return &StartupError{Var: config.VarDBPath, Value: cfg.DBPath, Rule: "must hold a database in a format this binary reads", Err: err}
	case errors.Is(err, keystore.ErrUnknownFormat):
		return &StartupError{Var: config.VarKeystorePath, Value: cfg.KeystorePath, Rule: "must hold a key store in a format this binary reads", Err: err}
	case errors.Is(err, keystore.ErrWrongKEK):
		return fmt.Errorf("%w (%s=%s): set %s to its current KEK: the one it was created with or, after keys rotate-kek, the one it was rotated to (the old one opens it no more)",
			err, config.VarKeystorePath, cfg.KeystorePath, config.VarKEK)
	case errors.Is(err, keystore.ErrRotationUnfinished):
		return err
	case errors.Is(err, store.ErrNoDatabase):
		// Only a command opens with MustExist: a mistyped path fails, naming it.
		return fmt.Errorf("%w at %s (%s): nothing was created; 'progressdb serve' creates one",
			store.ErrNoDatabase, cfg.DBPath, config.VarDBPath)
	}
	return err
}

// KeyStore is the key store st seals with; nil when st is plain.
func KeyStore(st *store.Store) *keystore.KeyStore {
	ks, _ := st.KeySealer().(*keystore.KeyStore)
	return ks
}

// Sealer is ks as the store's Sealer: nil (plain) when ks is nil, not a
// non-nil interface holding a nil pointer.
func Sealer(ks *keystore.KeyStore) store.Sealer {
	if ks == nil {
		return nil
	}
	return ks
}
