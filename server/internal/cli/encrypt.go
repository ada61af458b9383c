package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// encryptReport is what `keys encrypt-existing --json` prints.
type encryptReport struct {
	ExitCode int    `json:"exit_code"`
	Resumed  bool   `json:"resumed,omitempty"`
	Threads  int64  `json:"threads"`
	Sealed   int64  `json:"records_sealed"`
	Erased   bool   `json:"erased"`
	EraseMS  int64  `json:"erase_ms,omitempty"`
	Error    string `json:"error,omitempty"`
	// Before is how the threads stood when the pass started.
	Before store.ThreadCounts `json:"threads_before"`
}

// keysEncryptExisting seals what a database holds in plain (written before
// PROGRESSDB_KEK was set) and erases the plaintext it replaced: the
// workflow is retention's (EncryptExisting: lease, pause, pacing,
// resumable). It opens the database itself: stop the server first. On a
// terminal it draws its progress on one line of stderr; elsewhere its log
// says where it stands every few seconds.
func (e env) keysEncryptExisting(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("keys encrypt-existing", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	rep := encryptReport{}
	done := func(code int, msg string) int {
		rep.ExitCode = code
		if msg != "" {
			fmt.Fprintf(e.stderr, "progressdb keys encrypt-existing: %s\n", msg)
			rep.Error = msg
		}
		if *asJSON {
			writeJSON(e.stdout, rep)
		}
		return code
	}
	cfg, ok := e.loadConfig()
	if !ok {
		return exitUsage
	}
	if cfg.KEK == "" {
		return done(exitUsage, fmt.Sprintf("%s is not set: the records are sealed under data keys it wraps (with %s); 'progressdb keys generate-kek' prints one",
			config.VarKEK, config.VarKeystorePath))
	}
	bar, logger, closer, err := e.barAndLogger(cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", err)
		return exitUsage
	}
	defer closer.Close()
	var res retention.EncryptResult
	code, msg := exitOK, ""
	if cfg.Cluster.Enabled() {
		res, code, msg = encryptCluster(ctx, cfg, logger, bar)
	} else {
		res, code, msg = encryptUnderLease(ctx, cfg, logger, bar, func(st *store.Store) (*retention.Runner, error) {
			return retention.NewRunner(retention.RunnerOptions{Store: st, Config: cfg.Retention, Logger: logger})
		})
	}
	rep.Resumed, rep.Threads, rep.Sealed, rep.Erased, rep.EraseMS, rep.Before = res.Resumed, res.Threads, res.Sealed, res.Erased, res.EraseMS, res.Before
	if code != exitOK {
		return done(code, msg)
	}
	logger.Info("keys_encrypt_completed", "threads", res.Threads, "sealed", res.Sealed, "erased", res.Erased, "erase_ms", res.EraseMS)
	if !*asJSON {
		if res.Sealed == 0 && !res.Erased {
			fmt.Fprintf(e.stdout, "nothing to seal: the %d threads of %s are sealed\n", res.Before.Total(), cfg.DBPath)
		} else {
			fmt.Fprintf(e.stdout, "sealed:  %d records in %d threads of %s (%d threads were plain)\n", res.Sealed, res.Threads, cfg.DBPath, res.Before.Plain)
			fmt.Fprintf(e.stdout, "erased:  %t (the plaintext replaced is gone from every file under %s, %d ms)\n", res.Erased, config.VarDBPath, res.EraseMS)
		}
	}
	return done(exitOK, "")
}

// encryptUnderLease opens the database (keeping a server out), sealing
// it, and seals what it holds in plain under the lease of the runner
// newRunner builds over it (the retention lease; a shard's ownership on a
// cluster). code is exitOK once every record is sealed, else the exit
// status, msg saying why.
func encryptUnderLease(ctx context.Context, cfg config.Config, logger *slog.Logger, bar *progressBar,
	newRunner func(*store.Store) (*retention.Runner, error)) (res retention.EncryptResult, code int, msg string) {
	st, err := openStore(cfg, logger, mustExist, app.MaySeal)
	switch {
	case errors.Is(err, store.ErrDatabaseLocked):
		return res, exitFailed, fmt.Sprintf("a running server holds %s: stop it, seal, then start it again (it seals every new write already)", cfg.DBPath)
	case err != nil:
		return res, openExit(err), err.Error()
	}
	defer st.Close()
	runner, err := newRunner(st)
	if err != nil {
		return res, exitFailed, err.Error()
	}
	res, err = runner.EncryptExisting(ctx, retention.EncryptRequest{Progress: func(p retention.EncryptProgress) { bar.show(renderEncrypt(p)) }})
	bar.clear()
	var held *retention.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return res, exitLeaseHeld, fmt.Sprintf("the retention lease is held by %s: nothing was sealed; run it again once the run is over", held.Holder.Owner)
	case errors.Is(err, retention.ErrPaused):
		return res, exitFailed, fmt.Sprintf("retention is paused; %d records sealed so far: 'progressdb retention resume', then run it again to finish", res.Sealed)
	case err != nil:
		return res, exitFailed, fmt.Sprintf("%v; %d records sealed so far: run it again to finish", err, res.Sealed)
	}
	return res, exitOK, ""
}

// encryptCluster seals every shard of the stopped cluster node cfg names,
// each under the shard's ownership (spec §11.1); the counts add up over
// the shards. A pass killed part way is finished by the same command
// again: shards sealed already have nothing left to do.
func encryptCluster(ctx context.Context, cfg config.Config, logger *slog.Logger, bar *progressBar) (res retention.EncryptResult, code int, msg string) {
	shards, err := app.OpenHeldShards(ctx, cfg, logger)
	switch {
	case errors.Is(err, app.ErrNodeRunning):
		return res, exitFailed, fmt.Sprintf("%v, seal, then start it again (it seals every new write already)", err)
	case err != nil:
		return res, exitFailed, err.Error()
	}
	defer shards.Close()
	for _, n := range shards.Numbers() {
		r, code, msg := encryptUnderLease(ctx, app.ShardConfig(cfg, n), logger, bar,
			func(st *store.Store) (*retention.Runner, error) { return shards.Runner(ctx, n, st) })
		res.Resumed = res.Resumed || r.Resumed
		res.Threads, res.Sealed, res.EraseMS = res.Threads+r.Threads, res.Sealed+r.Sealed, res.EraseMS+r.EraseMS
		res.Erased = res.Erased || r.Erased
		res.Before.Sealed, res.Before.Plain = res.Before.Sealed+r.Before.Sealed, res.Before.Plain+r.Before.Plain
		if code != exitOK {
			return res, code, fmt.Sprintf("shard %d: %s", n, msg)
		}
	}
	return res, exitOK, ""
}
