package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/logging"
)

func (e env) serve(ctx context.Context, args []string) int {
	if !e.parseFlags(flag.NewFlagSet("serve", flag.ContinueOnError), args, false) {
		return exitUsage
	}
	cfg, logger, sink, ok := e.configAndLogger()
	if !ok {
		return exitUsage
	}
	defer sink.Close()
	warnConfig(logger, e.environ, cfg)
	defer reopenOnHangUp(logger, sink)()

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

// reopenOnHangUp makes SIGHUP reopen a file log sink, as logrotate's
// `postrotate kill -HUP` expects, instead of ending the server (SIGHUP's
// default action); with the stderr sink it only logs that it came. The
// returned function stops listening, before the sink closes.
func reopenOnHangUp(logger *slog.Logger, sink *logging.Sink) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-hup:
				if err := sink.Reopen(); err != nil {
					logger.Error("log_reopen_failed", "err", err)
					continue
				}
				logger.Info("sighup_received", "log_reopened", sink.IsFile())
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
		<-finished
	}
}
