package cli

import (
	"context"
	"flag"
	"fmt"

	"github.com/progressdb/progressdb/server/internal/buildinfo"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// versionReport is what `version --json` prints: the build, and the
// database and key-store formats it reads and writes (docs/upgrading.md).
type versionReport struct {
	buildinfo.Info
	DatabaseFormats []int `json:"database_formats"`
	KeyStoreFormats []int `json:"keystore_formats"`
}

// version prints the build: version and commit (stamped by the Makefile),
// Go and Pebble versions (recorded by the toolchain).
func (e env) version(_ context.Context, args []string) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the versions as JSON")
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	info := buildinfo.Read()
	rep := versionReport{Info: info}
	for f := store.FormatBase; f <= store.FormatNewest; f++ {
		rep.DatabaseFormats = append(rep.DatabaseFormats, int(f))
	}
	for f := keystore.FormatLegacy; f <= keystore.FormatBound; f++ {
		rep.KeyStoreFormats = append(rep.KeyStoreFormats, f)
	}
	if *asJSON {
		writeJSON(e.stdout, rep)
		return exitOK
	}
	fmt.Fprintf(e.stdout, "progressdb %s (commit %s)\n", info.Version, info.Commit)
	fmt.Fprintf(e.stdout, "go:     %s\n", info.Go)
	fmt.Fprintf(e.stdout, "pebble: %s\n", info.Pebble)
	fmt.Fprintf(e.stdout, "formats: database %d to %d, key store %d to %d (docs/upgrading.md)\n",
		store.FormatBase, store.FormatNewest, keystore.FormatLegacy, keystore.FormatBound)
	return exitOK
}
