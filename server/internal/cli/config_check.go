package cli

import (
	"flag"
	"fmt"
)

// configCheck validates the environment and prints the effective
// configuration with secrets redacted.
func (e env) configCheck(args []string) int {
	if !e.parseFlags(flag.NewFlagSet("config check", flag.ContinueOnError), args, false) {
		return exitUsage
	}
	cfg, ok := e.loadConfig()
	if !ok {
		return exitUsage
	}
	for _, kv := range cfg.Redacted() {
		fmt.Fprintf(e.stdout, "%s=%s\n", kv[0], kv[1])
	}
	fmt.Fprintln(e.stdout, "configuration ok")
	return exitOK
}
