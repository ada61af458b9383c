package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"strings"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
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

// keysRotateKEK rotates the key store to the new KEK (--to-file, --to):
// the workflow is app.RotateKEK (spec §12, design §11). From its end the
// old KEK opens nothing: a server started with it exits 1 (wrong KEK),
// which is why the output says to restart with the new KEK. A rotation
// killed part way is finished by the same command again.
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

	res, err := app.RotateKEK(ctx, cfg, logger, oldKEK, newKEK, func() (func(keystore.RewrapProgress), func()) {
		return rotateProgress(bar, logger), bar.clear
	})
	rep.Rewrapped, rep.AlreadyDone, rep.DurationMS = res.Rewrapped, res.AlreadyRotated, res.Duration.Milliseconds()
	if err != nil {
		return done(keysExit(err), err.Error())
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

// keysExit is the exit status of a keys workflow that stopped (an
// *app.KeysError): 75 while a run holds the lease, 2 for what the
// configuration must change, 1 otherwise.
func keysExit(err error) int {
	var held *retention.LeaseHeldError
	var ke *app.KeysError
	switch {
	case errors.As(err, &held):
		return exitLeaseHeld
	case errors.As(err, &ke) && ke.Reconfigure:
		return exitUsage
	}
	return exitFailed
}
