package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// configCheck validates the environment and prints the effective
// configuration with secrets redacted. It refuses exactly what serve
// refuses at startup (app.Check makes serve's checks, app.Validate), with
// the same one-line message and exit status 2, and leaves nothing behind:
// the folders and log file those checks create are removed again.
// PROGRESSDB_* variables that no setting reads are warned
// about (exit status unchanged): a typo would leave a default in force;
// so is what config.Warnings finds.
func (e env) configCheck(_ context.Context, args []string) int {
	if !e.parseFlags(flag.NewFlagSet("config check", flag.ContinueOnError), args, false) {
		return exitUsage
	}
	cfg, ok := e.loadConfig()
	if !ok {
		return exitUsage
	}
	for _, u := range config.UnknownVars(e.environ) {
		fmt.Fprintf(e.stderr, "progressdb config check: warning: %s\n", unknownVarMessage(u))
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(e.stderr, "progressdb config check: warning: %s\n", w)
	}
	if err := app.Check(cfg); err != nil {
		var verr *app.StartupError
		if !errors.As(err, &verr) {
			fmt.Fprintf(e.stderr, "progressdb config check: %v\n", err)
			return exitFailed
		}
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", err)
		return exitUsage
	}
	printConfig(e.stdout, cfg)
	fmt.Fprintln(e.stdout, "configuration ok")
	return exitOK
}

func printConfig(w io.Writer, cfg config.Config) {
	for _, kv := range cfg.Redacted() {
		fmt.Fprintf(w, "%s=%s\n", kv[0], kv[1])
	}
}

func unknownVarMessage(u config.Unknown) string {
	msg := u.Var + " is not a progressdb setting and is ignored"
	if u.Suggest != "" {
		msg += "; did you mean " + u.Suggest + "?"
	}
	return msg
}

// warnConfig logs the PROGRESSDB_* variables no setting reads and what
// config.Warnings finds.
func warnConfig(logger *slog.Logger, environ []string, cfg config.Config) {
	for _, u := range config.UnknownVars(environ) {
		logger.Warn("config_unknown_variable", "var", u.Var, "did_you_mean", u.Suggest)
	}
	for _, w := range cfg.Warnings() {
		logger.Warn(w.Event, "var", w.Var, "value", w.Value, "fix", w.Fix)
	}
}
