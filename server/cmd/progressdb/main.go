// Command progressdb is the chat-storage server and its operator command line.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/progressdb/progressdb/server/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
