package cli

import (
	"context"
	"flag"
	"fmt"

	"github.com/progressdb/progressdb/server/pkg/keystore"
)

// keysGenerateKEK prints a fresh local KEK URL (spec §12) and nothing else
// on stdout, so that `PROGRESSDB_KEK=$(progressdb keys generate-kek)`
// holds exactly the key. It reads no configuration and opens nothing.
func (e env) keysGenerateKEK(_ context.Context, args []string) int {
	fs := flag.NewFlagSet("keys generate-kek", flag.ContinueOnError)
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	url, err := keystore.GenerateKEK()
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb keys generate-kek: %v\n", err)
		return exitFailed
	}
	fmt.Fprintln(e.stdout, url)
	return exitOK
}
