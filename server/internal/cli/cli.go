// Package cli is progressdb's command line: the server and the operator
// commands of spec §9.
package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/progressdb/progressdb/server/internal/logging"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// Exit statuses.
const (
	exitOK        = 0
	exitFailed    = 1
	exitUsage     = 2 // also: invalid configuration
	exitLeaseHeld = 75
	usageTopLevel = "usage: progressdb [serve | seed | config check | retention run|status|pause|resume | audit verify] [flags]"
)

// env bundles what every command receives.
type env struct {
	environ        []string
	stdout, stderr io.Writer
}

// Main runs the command named by args and returns the exit status.
func Main(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	e := env{environ: environ, stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		return e.serve(ctx, nil)
	}
	switch args[0] {
	case "serve":
		return e.serve(ctx, args[1:])
	case "seed":
		return e.seed(ctx, args[1:])
	case "config":
		if len(args) > 1 && args[1] == "check" {
			return e.configCheck(args[2:])
		}
	case "retention":
		if len(args) > 1 {
			switch args[1] {
			case "run":
				return e.retentionRun(ctx, args[2:])
			case "status":
				return e.retentionStatus(ctx, args[2:])
			case "pause":
				return e.retentionPause(ctx, args[2:], true)
			case "resume":
				return e.retentionPause(ctx, args[2:], false)
			}
		}
	case "audit":
		if len(args) > 1 && args[1] == "verify" {
			return e.auditVerify(args[2:])
		}
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, usageTopLevel)
		return exitOK
	}
	fmt.Fprintln(stderr, usageTopLevel)
	return exitUsage
}

// loadConfig reads the environment; on error it prints the one-line
// message and returns false (the caller exits 2).
func (e env) loadConfig() (config.Config, bool) {
	cfg, err := config.Load(e.environ)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", err)
		return cfg, false
	}
	return cfg, true
}

// configAndLogger reads the environment and builds the configured logger,
// which the command closes when done. On error it prints the one-line
// message and returns false (the caller exits 2). config.Load has checked
// the level, the format and the sink's syntax, so what can still fail is
// opening the sink's file.
func (e env) configAndLogger() (config.Config, *slog.Logger, io.Closer, bool) {
	cfg, ok := e.loadConfig()
	if !ok {
		return cfg, nil, nil, false
	}
	l, c, err := logging.New(logging.Options{Level: cfg.LogLevel, Format: cfg.LogFormat, Sink: cfg.LogSink, Stderr: e.stderr})
	if err != nil {
		cerr := &config.Error{Var: config.VarLogSink, Value: cfg.LogSink, Rule: "must be stderr or a writable file:<path>: " + err.Error()}
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", cerr)
		return cfg, nil, nil, false
	}
	return cfg, l, c, true
}

// parseFlags parses a command's flags, printing errors to stderr; positional
// arguments are allowed only when allowArgs is set.
func (e env) parseFlags(fs *flag.FlagSet, args []string, allowArgs bool) bool {
	fs.SetOutput(e.stderr)
	if err := fs.Parse(args); err != nil {
		return false
	}
	if !allowArgs && fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "progressdb %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return false
	}
	return true
}
