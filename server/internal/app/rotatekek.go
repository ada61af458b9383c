package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"gocloud.dev/secrets"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// RotateResult is what RotateKEK did.
type RotateResult struct {
	Rewrapped int // keys re-wrapped under the new KEK
	// AlreadyRotated: the key stores were the new KEK's already (a
	// rotation that stopped before its erase), only the erase was left.
	AlreadyRotated bool
	Duration       time.Duration
}

// RotateKEK re-wraps every data key and secret of the key store cfg
// names from oldKEK (cfg.KEK's) to newKEK, makes it the key store's, and
// erases the old wrapped values from its files (spec §12, design §11);
// on a stopped cluster node, the key store of every shard it holds, each
// under the shard's ownership (spec §11.1), then the cluster's receipt
// key in etcd. It runs with no server holding the database and under
// the retention lease, so no run destroys keys meanwhile. Each step
// finds its work done when a rotation killed part way is run again. An
// error is a *KeysError, the result the database where it stopped.
func RotateKEK(ctx context.Context, cfg config.Config, logger *slog.Logger, oldKEK, newKEK *secrets.Keeper,
	pass Pass[keystore.RewrapProgress]) (RotateResult, error) {
	start := time.Now()
	total, last := RotateResult{AlreadyRotated: true}, RotateResult{}
	err := eachDatabase(ctx, cfg, logger, fmt.Sprintf("rotate, then start it with %s set to the new URL", config.VarKEK),
		func(cfg config.Config, newRunner newRunnerFunc) error {
			var err error
			last, err = rotateDatabase(ctx, cfg, logger, oldKEK, newKEK, pass, newRunner)
			total.Rewrapped += last.Rewrapped
			total.AlreadyRotated = total.AlreadyRotated && last.AlreadyRotated
			return err
		},
		func(shards *HeldShards) error {
			if err := shards.RewrapReceiptKey(ctx, oldKEK, newKEK); err != nil {
				total.Duration = last.Duration
				last = total
				return &KeysError{Msg: fmt.Sprintf("%v; every shard's key store is rotated: run the same command again to finish", err), Err: err}
			}
			return nil
		})
	if err != nil || !cfg.Cluster.Enabled() {
		return last, err
	}
	total.Duration = time.Since(start)
	return total, nil
}

// rotateDatabase opens the database cfg names (keeping a server out)
// with its key store opened for the rotation, and re-wraps every key
// under the lease of the runner newRunner builds over it.
func rotateDatabase(ctx context.Context, cfg config.Config, logger *slog.Logger, oldKEK, newKEK *secrets.Keeper,
	pass Pass[keystore.RewrapProgress], newRunner newRunnerFunc) (res RotateResult, err error) {
	// The data store is opened first, to keep a server out (a server
	// holds it and its key store while it runs), and opens the key store
	// itself: a sealed database opens only with its own (OpenStore).
	var ks *keystore.KeyStore
	st, err := store.Open(cfg.DBPath, store.Options{Logger: logger, MustExist: true,
		OpenSealer: func(ctx context.Context, _ store.SealState) (store.Sealer, io.Closer, error) {
			var err error
			ks, res.AlreadyRotated, err = openRotating(ctx, cfg, logger, oldKEK, newKEK)
			if err != nil {
				return nil, nil, err
			}
			return ks, ks, nil
		}})
	if err != nil {
		return res, openForKeys(err, fmt.Sprintf("a running server holds %s: stop it, rotate, then start it with %s set to the new URL", cfg.DBPath, config.VarKEK))
	}
	defer st.Close()
	runner, err := newRunner(st)
	if err != nil {
		return res, &KeysError{Msg: err.Error(), Err: err}
	}
	start := time.Now()
	report, end := pass()
	r, err := runner.RotateKEK(ctx, ks, newKEK, keystore.RewrapOptions{Progress: report})
	end()
	res.Rewrapped, res.Duration = r.Rewrapped, time.Since(start)
	var held *retention.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return res, &KeysError{Msg: fmt.Sprintf("the retention lease is held by %s: nothing was rotated; run it again once the run is over", held.Holder.Owner), Err: err}
	case err != nil:
		return res, &KeysError{Msg: fmt.Sprintf("%v; the rotation is unfinished: run the same command again, with the same new KEK", err), Err: err}
	}
	return res, nil
}

// openRotating opens the key store at PROGRESSDB_KEYSTORE_PATH for a
// rotation from oldKEK to newKEK; done is set when the rotation finished
// before its erase (the store is already newKEK's).
func openRotating(ctx context.Context, cfg config.Config, logger *slog.Logger, oldKEK, newKEK *secrets.Keeper) (ks *keystore.KeyStore, done bool, err error) {
	opts := keystore.Options{Keeper: oldKEK, RotateTo: newKEK, DataPath: cfg.DBPath, Logger: logger, MustExist: true}
	ks, err = keystore.Open(ctx, cfg.KeystorePath, opts)
	if errors.Is(err, keystore.ErrWrongKEK) {
		// A rotation to the new KEK that finished before its erase: the key
		// store is already the new KEK's, and the erase is what is left.
		opts.Keeper, opts.RotateTo = newKEK, nil
		if ks, err = keystore.Open(ctx, cfg.KeystorePath, opts); err != nil {
			return nil, false, fmt.Errorf("neither %s nor the new KEK opens the key store at %s (%s)", config.VarKEK, cfg.KeystorePath, config.VarKeystorePath)
		}
		return ks, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("open the key store at %s (%s): %w", cfg.KeystorePath, config.VarKeystorePath, err)
	}
	return ks, false, nil
}
