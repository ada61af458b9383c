package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// keysGenerateKEK prints a fresh local KEK URL (spec §12) and nothing else
// on stdout, so that `PROGRESSDB_KEK=$(progressdb keys generate-kek)`
// holds exactly the key. It reads no configuration and opens nothing.
func (e env) keysGenerateKEK(_ context.Context, args []string) int {
	fs := flag.NewFlagSet("keys generate-kek", flag.ContinueOnError)
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	url, err := keystore.GenerateKEK()
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb keys generate-kek: %v\n", err)
		return exitFailed
	}
	fmt.Fprintln(e.stdout, url)
	return exitOK
}

// rotateReport is what `keys rotate-kek --json` prints.
type rotateReport struct {
	ExitCode    int    `json:"exit_code"`
	KeyStore    string `json:"keystore"`
	Rewrapped   int    `json:"rewrapped"`
	AlreadyDone bool   `json:"already_rotated,omitempty"`
	DurationMS  int64  `json:"duration_ms"`
	Error       string `json:"error,omitempty"`
	RestartWith string `json:"restart_with,omitempty"`
}

// keysRotateKEK re-wraps every data key and secret of the key store with
// the KEK --to names, makes it the key store's, and erases the old wrapped
// values from the key store's files (spec §12, design §11). It runs with
// no server holding the database (the key store is one process's at a
// time) and under the retention lease, so no run destroys keys meanwhile.
// From its end the old KEK opens nothing: a server started with it exits
// 1 (wrong KEK), which is why the output says to restart with --to's URL.
// A rotation killed part way is finished by the same command again.
func (e env) keysRotateKEK(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("keys rotate-kek", flag.ContinueOnError)
	to := fs.String("to", "", "the new KEK's URL (base64key://… as 'progressdb keys generate-kek' prints, or a KMS key URL); required")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	rep := rotateReport{}
	done := func(code int, msg string) int {
		rep.ExitCode = code
		if msg != "" {
			fmt.Fprintf(e.stderr, "progressdb keys rotate-kek: %s\n", msg)
			rep.Error = msg
		}
		if *asJSON {
			writeJSON(e.stdout, rep)
		}
		return code
	}
	if *to == "" {
		return done(exitUsage, "--to URL is required: the new KEK ('progressdb keys generate-kek' prints one)")
	}
	cfg, logger, closer, ok := e.configAndLogger()
	if !ok {
		return exitUsage
	}
	defer closer.Close()
	rep.KeyStore = cfg.KeystorePath
	if cfg.KEK == "" {
		return done(exitUsage, config.VarKEK+" is not set: it must hold the current KEK, the one the key store was made with")
	}
	if *to == cfg.KEK {
		return done(exitUsage, "--to is the current KEK ("+config.VarKEK+"): nothing to rotate")
	}
	newKEK, err := keystore.OpenKEK(ctx, *to)
	if err != nil {
		return done(exitUsage, "--to: "+strings.Replace(err.Error(), "invalid "+keystore.VarKEK, "not a usable KEK URL", 1))
	}
	defer newKEK.Close()
	oldKEK, err := keystore.OpenKEK(ctx, cfg.KEK)
	if err != nil { // config.Load checked it already
		return done(exitUsage, err.Error())
	}
	defer oldKEK.Close()

	// The data store is opened first and only to keep a server out: a
	// server holds it (and its key store) while it runs.
	st, err := store.Open(cfg.DBPath, store.Options{Logger: logger, MustExist: true})
	switch {
	case errors.Is(err, store.ErrDatabaseLocked):
		return done(exitFailed, fmt.Sprintf("a running server holds %s: stop it, rotate, then start it with %s set to the new URL", cfg.DBPath, config.VarKEK))
	case err != nil:
		return done(exitFailed, err.Error())
	}
	defer st.Close()
	ks, err := keystore.Open(ctx, cfg.KeystorePath, keystore.Options{Keeper: oldKEK, RotateTo: newKEK, DataPath: cfg.DBPath, Logger: logger})
	if errors.Is(err, keystore.ErrWrongKEK) {
		// A rotation to --to that finished before its erase: the key store
		// is already the new KEK's, and the erase is what is left.
		ks, err = keystore.Open(ctx, cfg.KeystorePath, keystore.Options{Keeper: newKEK, DataPath: cfg.DBPath, Logger: logger})
		if err != nil {
			return done(exitFailed, fmt.Sprintf("neither %s nor --to opens the key store at %s (%s)", config.VarKEK, cfg.KeystorePath, config.VarKeystorePath))
		}
		rep.AlreadyDone = true
	}
	if err != nil {
		return done(exitFailed, fmt.Sprintf("open the key store at %s (%s): %v", cfg.KeystorePath, config.VarKeystorePath, err))
	}
	defer ks.Close()
	runner, err := retention.NewRunner(retention.RunnerOptions{Store: st, Config: cfg.Retention, Logger: logger})
	if err != nil {
		return done(exitFailed, err.Error())
	}
	var res keystore.RewrapResult
	start := time.Now()
	err = runner.Exclusive(ctx, "rotate kek", func(ctx context.Context, check func() error) error {
		if err := check(); err != nil {
			return err
		}
		res, err = ks.Rewrap(ctx, newKEK)
		return err
	})
	rep.Rewrapped, rep.DurationMS = res.Rewrapped, time.Since(start).Milliseconds()
	var held *retention.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return done(exitLeaseHeld, fmt.Sprintf("the retention lease is held by %s: nothing was rotated; run it again once the run is over", held.Holder.Owner))
	case err != nil:
		return done(exitFailed, fmt.Sprintf("%v; the rotation is unfinished: run the same command again, with the same --to", err))
	}
	logger.Info("kek_rotated", "keystore", cfg.KeystorePath, "rewrapped", res.Rewrapped, "duration_ms", rep.DurationMS)
	rep.RestartWith = "set " + config.VarKEK + " to the --to URL: the old KEK opens nothing any more"
	if !*asJSON {
		fmt.Fprintf(e.stdout, "keystore:  %s\n", cfg.KeystorePath)
		fmt.Fprintf(e.stdout, "rewrapped: %d keys\n", res.Rewrapped)
		fmt.Fprintf(e.stdout, "erased:    the old wrapped keys from the key store's files (%d ms in all)\n", rep.DurationMS)
		fmt.Fprintf(e.stdout, "next:      %s\n", rep.RestartWith)
	}
	return done(exitOK, "")
}
