package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/progressdb/progressdb/server/internal/app"
)

// configCheck validates the environment and prints the effective
// configuration with secrets redacted. It refuses what serve would refuse
// at startup, with the same one-line message and exit status 2, so it runs
// the same checks: the log sink is opened and the folders serve needs are
// created if missing and checked writable.
func (e env) configCheck(_ context.Context, args []string) int {
	if !e.parseFlags(flag.NewFlagSet("config check", flag.ContinueOnError), args, false) {
		return exitUsage
	}
	cfg, _, closer, ok := e.configAndLogger()
	if !ok {
		return exitUsage
	}
	closer.Close()
	if err := app.Validate(cfg); err != nil {
		var verr *app.StartupError
		if !errors.As(err, &verr) {
			fmt.Fprintf(e.stderr, "progressdb config check: %v\n", err)
			return exitFailed
		}
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", err)
		return exitUsage
	}
	for _, kv := range cfg.Redacted() {
		fmt.Fprintf(e.stdout, "%s=%s\n", kv[0], kv[1])
	}
	fmt.Fprintln(e.stdout, "configuration ok")
	return exitOK
}
