package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/progressdb/progressdb/server/internal/app"
)

func (e env) serve(ctx context.Context, args []string) int {
	if !e.parseFlags(flag.NewFlagSet("serve", flag.ContinueOnError), args, false) {
		return exitUsage
	}
	cfg, logger, closer, ok := e.configAndLogger()
	if !ok {
		return exitUsage
	}
	defer closer.Close()
	warnUnknownVars(logger, e.environ)

	err := app.Serve(ctx, cfg, logger)
	var verr *app.StartupError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &verr):
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", err)
		return exitUsage
	default:
		logger.Error("server_failed", "err", err)
		fmt.Fprintf(e.stderr, "progressdb: %v\n", err)
		return exitFailed
	}
}
