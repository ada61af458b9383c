package cli

import (
	"context"
	"flag"
	"fmt"

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
// workflow is app.EncryptExisting (retention's: lease, pause, pacing,
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
	res, err := app.EncryptExisting(ctx, cfg, logger, func() (func(retention.EncryptProgress), func()) {
		return func(p retention.EncryptProgress) { bar.show(renderEncrypt(p)) }, bar.clear
	})
	rep.Resumed, rep.Threads, rep.Sealed, rep.Erased, rep.EraseMS, rep.Before = res.Resumed, res.Threads, res.Sealed, res.Erased, res.EraseMS, res.Before
	if err != nil {
		return done(keysExit(err), err.Error())
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
