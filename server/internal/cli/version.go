package cli

import (
	"context"
	"flag"
	"fmt"

	"github.com/progressdb/progressdb/server/internal/buildinfo"
)

// version prints the build: version and commit (stamped by the Makefile),
// Go and Pebble versions (recorded by the toolchain).
func (e env) version(_ context.Context, args []string) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the versions as JSON")
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	info := buildinfo.Read()
	if *asJSON {
		writeJSON(e.stdout, info)
		return exitOK
	}
	fmt.Fprintf(e.stdout, "progressdb %s (commit %s)\n", info.Version, info.Commit)
	fmt.Fprintf(e.stdout, "go:     %s\n", info.Go)
	fmt.Fprintf(e.stdout, "pebble: %s\n", info.Pebble)
	return exitOK
}
