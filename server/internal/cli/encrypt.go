package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// encryptReport is what `keys encrypt-existing --json` prints.
type encryptReport struct {
	ExitCode int    `json:"exit_code"`
	Resumed  bool   `json:"resumed,omitempty"`
	Threads  int    `json:"threads"`
	Sealed   int    `json:"records_sealed"`
	Erased   bool   `json:"erased"`
	Error    string `json:"error,omitempty"`
}

// keysEncryptExisting seals what a database holds in plain (written before
// PROGRESSDB_KEK was set), thread by thread in ID order, in batches of
// PROGRESSDB_RETENTION_BATCH_SIZE records with PROGRESSDB_RETENTION_BATCH_PAUSE
// between them, under the retention lease; then it erases the plaintext
// it replaced from every file under DB_PATH (the erase step of
// docs/erasure.md). Killed, it resumes after the last thread it finished;
// run again once done, it finds nothing to seal and exits 0 (spec §12,
// design §10). It opens the database itself: stop the server first.
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
	cfg, logger, closer, ok := e.configAndLogger()
	if !ok {
		return exitUsage
	}
	defer closer.Close()
	if cfg.KEK == "" {
		return done(exitUsage, fmt.Sprintf("%s is not set: the records are sealed under data keys it wraps (with %s); 'progressdb keys generate-kek' prints one",
			config.VarKEK, config.VarKeystorePath))
	}
	st, err := openStore(cfg, logger, mustExist)
	switch {
	case errors.Is(err, store.ErrDatabaseLocked):
		return done(exitFailed, fmt.Sprintf("a running server holds %s: stop it, seal, then start it again (it seals every new write already)", cfg.DBPath))
	case err != nil:
		return done(exitFailed, err.Error())
	}
	defer st.Close()
	runner, err := retention.NewRunner(retention.RunnerOptions{Store: st, Config: cfg.Retention, Logger: logger})
	if err != nil {
		return done(exitFailed, err.Error())
	}
	err = runner.Exclusive(ctx, "encrypt existing", func(ctx context.Context, check func() error) error {
		pass, resumed, err := st.SealCursor(ctx)
		if err != nil {
			return err
		}
		rep.Resumed = resumed
		if resumed {
			logger.Info("keys_encrypt_resumed", "after_thread", pass.After)
		}
		after := pass.After
		for {
			tid, err := st.NextThread(ctx, after)
			if err != nil || tid == "" {
				if err != nil {
					return err
				}
				break
			}
			for {
				if err := check(); err != nil {
					return err
				}
				n, finished, err := st.SealThread(ctx, tid, after, cfg.Retention.BatchSize)
				if err != nil {
					return err
				}
				rep.Sealed += n
				if n > 0 {
					logger.Info("keys_encrypt_batch", "thread_id", tid, "sealed", n, "sealed_total", rep.Sealed)
					if err := pause(ctx, cfg.Retention.BatchPause); err != nil {
						return err
					}
				}
				if finished {
					break
				}
			}
			rep.Threads++
			after = tid
		}
		erased, err := st.Erased(ctx)
		if err != nil {
			return err
		}
		if !erased {
			// The plaintext replaced is anywhere in the files: the whole
			// key space is erased, at the configured rate.
			if _, err := st.Erase(ctx, nil, store.EraseOptions{Full: true, Rate: int64(cfg.Retention.EraseRate) << 20}); err != nil {
				return err
			}
			rep.Erased = true
		}
		return st.EndSealPass(ctx)
	})
	var held *retention.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return done(exitLeaseHeld, fmt.Sprintf("the retention lease is held by %s: nothing was sealed; run it again once the run is over", held.Holder.Owner))
	case err != nil:
		return done(exitFailed, fmt.Sprintf("%v; %d records sealed so far: run it again to finish", err, rep.Sealed))
	}
	logger.Info("keys_encrypt_completed", "threads", rep.Threads, "sealed", rep.Sealed, "erased", rep.Erased)
	if !*asJSON {
		if rep.Sealed == 0 && !rep.Erased {
			fmt.Fprintf(e.stdout, "nothing to seal: the %d threads of %s are sealed\n", rep.Threads, cfg.DBPath)
		} else {
			fmt.Fprintf(e.stdout, "sealed:  %d records in %d threads of %s\n", rep.Sealed, rep.Threads, cfg.DBPath)
			fmt.Fprintf(e.stdout, "erased:  %t (the plaintext replaced is gone from every file under %s)\n", rep.Erased, config.VarDBPath)
		}
	}
	return done(exitOK, "")
}

// pause waits d (nothing when 0) unless ctx ends first.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
