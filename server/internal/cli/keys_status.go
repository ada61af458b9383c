package cli

import (
	"context"
	"flag"
	"fmt"
	"net/http"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// keysStatusReport is what `keys status --json` prints.
type keysStatusReport struct {
	Database database           `json:"database"`
	Threads  store.ThreadCounts `json:"threads"`
}

// keysStatus says how much of a database is sealed (spec §12): its
// threads whose record is sealed and those still plain, which `keys
// encrypt-existing` seals. On the database when no server holds it, else
// through the server's GET /admin/database?threads=true.
func (e env) keysStatus(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("keys status", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the counts as JSON")
	server := serverFlag(fs)
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	cfg, logger, closer, ok := e.configAndLogger()
	if !ok {
		return exitUsage
	}
	defer closer.Close()
	var rep keysStatusReport
	db, code := e.onDatabase(ctx, cfg, logger, "keys status", *server, func(st *store.Store) (err error) {
		rep.Threads, err = st.CountThreads(ctx, "")
		return err
	}, func(c *adminClient) error {
		var served api.Database
		if err := c.do(ctx, http.MethodGet, "/admin/database?threads=true", nil, &served); err != nil {
			return err
		}
		if served.Threads == nil {
			return fmt.Errorf("the server at %s did not count its threads: it predates keys status", c.base)
		}
		rep.Threads = *served.Threads
		return nil
	})
	if code != exitOK {
		return code
	}
	rep.Database = db
	if *asJSON {
		writeJSON(e.stdout, rep)
		return exitOK
	}
	printDatabase(e.stdout, db)
	fmt.Fprintf(e.stdout, "threads:         %d sealed, %d plain\n", rep.Threads.Sealed, rep.Threads.Plain)
	switch {
	case rep.Threads.Plain > 0 && cfg.KEK == "":
		fmt.Fprintf(e.stdout, "plain threads:   written without sealing; with %s set, 'progressdb keys encrypt-existing' seals them\n", config.VarKEK)
	case rep.Threads.Plain > 0:
		fmt.Fprintln(e.stdout, "plain threads:   written before sealing was on; 'progressdb keys encrypt-existing' seals them (server stopped)")
	}
	return exitOK
}
