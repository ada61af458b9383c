package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"strings"
	"time"

	"gocloud.dev/secrets"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// keysGenerateKEK makes a fresh local KEK URL (spec §12). With --out it
// writes it to a new file, 0600, for PROGRESSDB_KEK_FILE, and never
// overwrites one (it may hold the only copy of a key); without, it prints
// the URL and nothing else on stdout, for a pipe into a secret store. It
// reads no configuration and opens nothing else.
func (e env) keysGenerateKEK(_ context.Context, args []string) int {
	fs := flag.NewFlagSet("keys generate-kek", flag.ContinueOnError)
	out := fs.String("out", "", "write the KEK to FILE (created 0600, never overwritten) instead of stdout, for PROGRESSDB_KEK_FILE")
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	url, err := keystore.GenerateKEK()
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb keys generate-kek: %v\n", err)
		return exitFailed
	}
	if *out == "" {
		fmt.Fprintln(e.stdout, url)
		return exitOK
	}
	if err := writeNewSecret(*out, url+"\n"); err != nil {
		if errors.Is(err, iofs.ErrExist) {
			fmt.Fprintf(e.stderr, "progressdb keys generate-kek: --out %s exists: a KEK file is never overwritten (it may hold the only copy of a key); choose another path\n", *out)
			return exitUsage
		}
		fmt.Fprintf(e.stderr, "progressdb keys generate-kek: --out: %v\n", err)
		return exitFailed
	}
	fmt.Fprintf(e.stdout, "a new KEK is in %s (mode 0600): serve with %s=%s, and keep a copy apart from the key store's backups (docs/encryption.md)\n",
		*out, config.VarKEKFile, *out)
	return exitOK
}

// writeNewSecret writes content to a file that must not exist yet,
// readable by its owner only, synced; a failed write leaves no file.
func writeNewSecret(path, content string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

// readNewKEK returns the new KEK of rotate-kek: a KMS key URL given with
// --to (it names a key and holds none), or a URL read from the file
// --to-file names ("-": standard input), so that a local key never shows
// in ps or in the shell's history. The error is the message for exit 2.
func (e env) readNewKEK(to, toFile string) (string, error) {
	switch {
	case to != "" && toFile != "":
		return "", errors.New("--to and --to-file are both set: give the new KEK once")
	case to == "" && toFile == "":
		return "", errors.New("the new KEK is required: --to-file FILE (or --to-file - for standard input) with the URL 'progressdb keys generate-kek --out FILE' writes, or --to URL for a KMS key")
	case to != "":
		if scheme, _, _ := strings.Cut(to, "://"); scheme == config.LocalKEKScheme {
			return "", errors.New("--to takes a KMS key URL only: a local key on the command line shows in ps and the shell's history; " +
				"pass it with --to-file FILE or --to-file - (standard input)")
		}
		return to, nil
	case toFile == "-":
		b, err := io.ReadAll(io.LimitReader(e.stdin, 64<<10))
		v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if err != nil {
			return "", fmt.Errorf("--to-file -: read standard input: %w", err)
		}
		if v == "" {
			return "", errors.New("--to-file -: standard input holds no KEK URL")
		}
		return v, nil
	}
	v, err := config.ReadSecretFile("--to-file", toFile)
	if err != nil {
		return "", err
	}
	return v, nil
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
// the new KEK (--to-file, --to), makes it the key store's, and erases the old wrapped
// values from the key store's files (spec §12, design §11). It runs with
// no server holding the database (the key store is one process's at a
// time) and under the retention lease, so no run destroys keys meanwhile.
// From its end the old KEK opens nothing: a server started with it exits
// 1 (wrong KEK), which is why the output says to restart with the new KEK.
// A rotation killed part way is finished by the same command again.
func (e env) keysRotateKEK(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("keys rotate-kek", flag.ContinueOnError)
	to := fs.String("to", "", "the new KEK as a KMS key URL (a local key goes in --to-file)")
	toFile := fs.String("to-file", "", "read the new KEK's URL from FILE ('-': standard input), as 'progressdb keys generate-kek --out FILE' writes it")
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
	newURL, err := e.readNewKEK(*to, *toFile)
	if err != nil {
		return done(exitUsage, err.Error())
	}
	cfg, ok := e.loadConfig()
	if !ok {
		return exitUsage
	}
	bar, logger, closer, err := e.barAndLogger(cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", err)
		return exitUsage
	}
	defer closer.Close()
	rep.KeyStore = cfg.KeystorePath
	if cfg.KEK == "" {
		return done(exitUsage, config.VarKEK+" is not set: it must hold the current KEK, the one the key store was made with")
	}
	if newURL == cfg.KEK {
		return done(exitUsage, "the new KEK is the current one ("+config.VarKEK+"): nothing to rotate")
	}
	newKEK, err := keystore.OpenKEK(ctx, newURL)
	if err != nil {
		return done(exitUsage, "the new KEK: "+strings.Replace(err.Error(), "invalid "+keystore.VarKEK, "not a usable KEK URL", 1))
	}
	defer newKEK.Close()
	oldKEK, err := keystore.OpenKEK(ctx, cfg.KEK)
	if err != nil { // config.Load checked it already
		return done(exitUsage, err.Error())
	}
	defer oldKEK.Close()

	var res keystore.RewrapResult
	code, msg := exitOK, ""
	if cfg.Cluster.Enabled() {
		res, code, msg = rotateCluster(ctx, cfg, logger, bar, oldKEK, newKEK, &rep)
	} else {
		res, code, msg = rewrapUnderLease(ctx, cfg, logger, bar, oldKEK, newKEK, &rep, func(st *store.Store) (*retention.Runner, error) {
			return retention.NewRunner(retention.RunnerOptions{Store: st, Config: cfg.Retention, Logger: logger})
		})
	}
	if code != exitOK {
		return done(code, msg)
	}
	logger.Info("kek_rotated", "keystore", cfg.KeystorePath, "rewrapped", res.Rewrapped, "duration_ms", rep.DurationMS)
	rep.RestartWith = "set " + config.VarKEK + " (or " + config.VarKEKFile + ") to the new KEK: the old KEK opens nothing any more"
	if !*asJSON {
		fmt.Fprintf(e.stdout, "keystore:  %s\n", cfg.KeystorePath)
		fmt.Fprintf(e.stdout, "rewrapped: %d keys\n", res.Rewrapped)
		fmt.Fprintf(e.stdout, "erased:    the old wrapped keys from the key store's files (%d ms in all)\n", rep.DurationMS)
		fmt.Fprintf(e.stdout, "next:      %s\n", rep.RestartWith)
	}
	return done(exitOK, "")
}

// rewrapUnderLease opens the database (keeping a server out) with its key
// store opened for the rotation, and re-wraps every key under the lease
// of the runner newRunner builds over it (the retention lease; a shard's
// ownership on a cluster). code is exitOK when every key is under newKEK,
// else the exit status, msg saying why.
func rewrapUnderLease(ctx context.Context, cfg config.Config, logger *slog.Logger, bar *progressBar,
	oldKEK, newKEK *secrets.Keeper, rep *rotateReport,
	newRunner func(*store.Store) (*retention.Runner, error)) (res keystore.RewrapResult, code int, msg string) {
	// The data store is opened first, to keep a server out (a server
	// holds it and its key store while it runs), and opens the key store
	// itself: a sealed database opens only with its own (app.OpenStore).
	var ks *keystore.KeyStore
	st, err := store.Open(cfg.DBPath, store.Options{Logger: logger, MustExist: true,
		OpenSealer: func(ctx context.Context, _ store.SealState) (store.Sealer, io.Closer, error) {
			var err error
			ks, rep.AlreadyDone, err = openRotating(ctx, cfg, logger, oldKEK, newKEK)
			if err != nil {
				return nil, nil, err
			}
			return ks, ks, nil
		}})
	switch {
	case errors.Is(err, store.ErrDatabaseLocked):
		return res, exitFailed, fmt.Sprintf("a running server holds %s: stop it, rotate, then start it with %s set to the new URL", cfg.DBPath, config.VarKEK)
	case err != nil:
		return res, openExit(err), err.Error()
	}
	defer st.Close()
	runner, err := newRunner(st)
	if err != nil {
		return res, exitFailed, err.Error()
	}
	start := time.Now()
	res, err = runner.RotateKEK(ctx, ks, newKEK, keystore.RewrapOptions{Progress: rotateProgress(bar, logger)})
	bar.clear()
	rep.Rewrapped, rep.DurationMS = res.Rewrapped, time.Since(start).Milliseconds()
	var held *retention.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return res, exitLeaseHeld, fmt.Sprintf("the retention lease is held by %s: nothing was rotated; run it again once the run is over", held.Holder.Owner)
	case err != nil:
		return res, exitFailed, fmt.Sprintf("%v; the rotation is unfinished: run the same command again, with the same new KEK", err)
	}
	return res, exitOK, ""
}

// rotateCluster rotates the key store of every shard of the stopped
// cluster node cfg names, each under the shard's ownership (spec §11.1),
// then the cluster's receipt key in etcd. Each step finds its work done
// when a rotation killed part way is run again.
func rotateCluster(ctx context.Context, cfg config.Config, logger *slog.Logger, bar *progressBar,
	oldKEK, newKEK *secrets.Keeper, rep *rotateReport) (res keystore.RewrapResult, code int, msg string) {
	start := time.Now()
	shards, err := app.OpenHeldShards(ctx, cfg, logger)
	switch {
	case errors.Is(err, app.ErrNodeRunning):
		return res, exitFailed, fmt.Sprintf("%v, rotate, then start it with %s set to the new URL", err, config.VarKEK)
	case err != nil:
		return res, exitFailed, err.Error()
	}
	defer shards.Close()
	done := true
	for _, n := range shards.Numbers() {
		r, code, msg := rewrapUnderLease(ctx, app.ShardConfig(cfg, n), logger, bar, oldKEK, newKEK, rep,
			func(st *store.Store) (*retention.Runner, error) { return shards.Runner(ctx, n, st) })
		res.Rewrapped += r.Rewrapped
		done = done && rep.AlreadyDone
		if code != exitOK {
			return res, code, fmt.Sprintf("shard %d: %s", n, msg)
		}
	}
	rep.Rewrapped, rep.AlreadyDone = res.Rewrapped, done
	if err := shards.RewrapReceiptKey(ctx, oldKEK, newKEK); err != nil {
		return res, exitFailed, fmt.Sprintf("%v; every shard's key store is rotated: run the same command again to finish", err)
	}
	rep.DurationMS = time.Since(start).Milliseconds()
	return res, exitOK, ""
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
