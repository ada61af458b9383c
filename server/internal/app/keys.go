package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// KeysError is a keys workflow (RotateKEK, EncryptExisting) that stopped.
// Its message says what happened and what to do next, for the operator;
// Err is the cause (a *retention.LeaseHeldError when a run holds the
// lease: nothing was done).
type KeysError struct {
	Msg string
	Err error
	// Reconfigure: a database did not open as configured (a
	// *StartupError): the configuration must change before a retry.
	Reconfigure bool
}

func (e *KeysError) Error() string { return e.Msg }

func (e *KeysError) Unwrap() error { return e.Err }

// Pass starts a keys workflow's pass over one database (one per shard on
// a cluster): report receives its progress, end is called when it is
// over.
type Pass[P any] func() (report func(P), end func())

// newRunnerFunc builds the runner whose lease a pass runs under.
type newRunnerFunc func(*store.Store) (*retention.Runner, error)

// eachDatabase runs pass on the database cfg names, under the retention
// lease, or, on a cluster node, on each shard it holds, under the
// shard's ownership (spec §11.1), then finish with the shards. The node
// must be stopped: the command registers in its place; running ends
// the message that says it is not ("<why>, <running>").
func eachDatabase(ctx context.Context, cfg config.Config, logger *slog.Logger, running string,
	pass func(config.Config, newRunnerFunc) error, finish func(*HeldShards) error) error {
	if !cfg.Cluster.Enabled() {
		// With the blob store, as every runner: a run it finishes
		// deletes the blobs its purges owe.
		blobs, err := OpenBlobs(ctx, cfg, cfg.DBPath)
		if err != nil {
			return &KeysError{Msg: err.Error(), Err: err}
		}
		defer blobs.Close()
		return pass(cfg, func(st *store.Store) (*retention.Runner, error) {
			return retention.NewRunner(retention.RunnerOptions{Store: st, Config: cfg.Retention, Logger: logger, Blobs: blobs})
		})
	}
	shards, err := OpenHeldShards(ctx, cfg, logger)
	switch {
	case errors.Is(err, ErrNodeRunning):
		return &KeysError{Msg: fmt.Sprintf("%v, %s", err, running), Err: err}
	case err != nil:
		return &KeysError{Msg: err.Error(), Err: err}
	}
	defer shards.Close()
	for _, n := range shards.Numbers() {
		err := pass(ShardConfig(cfg, n), func(st *store.Store) (*retention.Runner, error) { return shards.Runner(ctx, n, st) })
		if err != nil {
			ke := &KeysError{Msg: fmt.Sprintf("shard %d: %v", n, err), Err: err}
			var inner *KeysError
			if errors.As(err, &inner) {
				ke.Reconfigure = inner.Reconfigure
			}
			return ke
		}
	}
	if finish == nil {
		return nil
	}
	return finish(shards)
}

// openForKeys wraps the error of a database's open for a keys workflow:
// a server holding it is locked, what the configuration must change
// Reconfigure.
func openForKeys(err error, locked string) error {
	if errors.Is(err, store.ErrDatabaseLocked) {
		return &KeysError{Msg: locked, Err: err}
	}
	var se *StartupError
	return &KeysError{Msg: err.Error(), Err: err, Reconfigure: errors.As(err, &se)}
}

// EncryptExisting seals what the database cfg names holds in plain
// (written before PROGRESSDB_KEK was set) and erases the plaintext it
// replaced, or, on a stopped cluster node, every shard it holds, each
// under the shard's ownership; the counts add up over the shards. The
// work is retention's (lease, pause, pacing, resumable): a pass killed
// part way is finished by the same call again. An error is a
// *KeysError; the result says what was done.
func EncryptExisting(ctx context.Context, cfg config.Config, logger *slog.Logger, pass Pass[retention.EncryptProgress]) (retention.EncryptResult, error) {
	var res retention.EncryptResult
	err := eachDatabase(ctx, cfg, logger, "seal, then start it again (it seals every new write already)",
		func(cfg config.Config, newRunner newRunnerFunc) error {
			r, err := encryptDatabase(ctx, cfg, logger, pass, newRunner)
			res.Resumed, res.After = res.Resumed || r.Resumed, r.After
			res.Threads, res.Sealed, res.EraseMS = res.Threads+r.Threads, res.Sealed+r.Sealed, res.EraseMS+r.EraseMS
			res.Erased = res.Erased || r.Erased
			res.Before.Sealed, res.Before.Plain = res.Before.Sealed+r.Before.Sealed, res.Before.Plain+r.Before.Plain
			return err
		}, nil)
	return res, err
}

// encryptDatabase opens the database cfg names (keeping a server out),
// sealing it, and seals what it holds in plain under the lease of the
// runner newRunner builds over it.
func encryptDatabase(ctx context.Context, cfg config.Config, logger *slog.Logger, pass Pass[retention.EncryptProgress],
	newRunner newRunnerFunc) (res retention.EncryptResult, err error) {
	st, err := OpenStore(ctx, cfg, logger, store.Options{Logger: logger, MustExist: true}, MaySeal)
	if err != nil {
		return res, openForKeys(err, fmt.Sprintf("a running server holds %s: stop it, seal, then start it again (it seals every new write already)", cfg.DBPath))
	}
	defer st.Close()
	runner, err := newRunner(st)
	if err != nil {
		return res, &KeysError{Msg: err.Error(), Err: err}
	}
	report, end := pass()
	res, err = runner.EncryptExisting(ctx, retention.EncryptRequest{Progress: report})
	end()
	var held *retention.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return res, &KeysError{Msg: fmt.Sprintf("the retention lease is held by %s: nothing was sealed; run it again once the run is over", held.Holder.Owner), Err: err}
	case errors.Is(err, retention.ErrPaused):
		return res, &KeysError{Msg: fmt.Sprintf("retention is paused; %d records sealed so far: 'progressdb retention resume', then run it again to finish", res.Sealed), Err: err}
	case err != nil:
		return res, &KeysError{Msg: fmt.Sprintf("%v; %d records sealed so far: run it again to finish", err, res.Sealed), Err: err}
	}
	return res, nil
}
