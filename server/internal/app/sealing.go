package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// OpenKeyStore opens the key store of sealed content (spec §12) when
// PROGRESSDB_KEK is set; nil, nil when it is not (nothing is sealed). The
// configuration was validated by config.Load; a KEK that does not open
// this key store is an error naming both, never the key.
func OpenKeyStore(ctx context.Context, cfg config.Config, logger *slog.Logger) (*keystore.KeyStore, error) {
	if cfg.KEK == "" {
		return nil, nil
	}
	keeper, err := keystore.OpenKEK(ctx, cfg.KEK)
	if err != nil {
		return nil, &StartupError{Var: config.VarKEK, Value: "<redacted>", Rule: "must be a usable KEK URL", Err: err}
	}
	ks, err := keystore.Open(ctx, cfg.KeystorePath, keystore.Options{Keeper: keeper, DataPath: cfg.DBPath, Logger: logger})
	switch {
	case errors.Is(err, keystore.ErrInsideDataPath):
		return nil, &StartupError{Var: config.VarKeystorePath, Value: cfg.KeystorePath,
			Rule: "must be outside " + config.VarDBPath, Err: err}
	case errors.Is(err, keystore.ErrWrongKEK):
		return nil, fmt.Errorf("%w (%s=%s): set %s to its current KEK: the one it was created with or, after keys rotate-kek, the one it was rotated to (the old one opens it no more)",
			err, config.VarKeystorePath, cfg.KeystorePath, config.VarKEK)
	case err != nil:
		return nil, fmt.Errorf("open key store (%s=%s): %w", config.VarKeystorePath, cfg.KeystorePath, err)
	}
	return ks, nil
}

// Sealer is ks as the store's Sealer: nil (plain) when ks is nil, not a
// non-nil interface holding a nil pointer.
func Sealer(ks *keystore.KeyStore) store.Sealer {
	if ks == nil {
		return nil
	}
	return ks
}

// closeKeyStore closes ks, when open, logging a failure.
func closeKeyStore(ks *keystore.KeyStore, logger *slog.Logger) {
	if ks == nil {
		return
	}
	if err := ks.Close(); err != nil {
		logger.Error("keystore_close_failed", "err", err)
	}
}
