package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/progressdb/progressdb/server/internal/logging"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// shownTime prints a wire time for people: RFC 3339 to the second, "-"
// when unset.
func shownTime(t wire.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// threadReport is `thread get`'s answer: the database, the thread with its
// hold, and its retention override with the policy in force.
type threadReport struct {
	Database  database               `json:"database"`
	Thread    wire.Thread            `json:"thread"`
	Retention retention.ThreadPolicy `json:"retention"`
}

// threadArgs is what a command on one thread is given.
type threadArgs struct {
	tid    string
	asJSON bool
	server string // --server
}

// threadArg parses a command that takes one thread ID, --json and
// --server.
func (e env) threadArg(name string, args []string) (threadArgs, bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	j := fs.Bool("json", false, "print JSON")
	server := serverFlag(fs)
	if !e.parseFlags(fs, args, true) {
		return threadArgs{}, false
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(e.stderr, "progressdb %s: give one thread ID\n", name)
		return threadArgs{}, false
	}
	if err := store.ValidateID(fs.Arg(0)); err != nil {
		fmt.Fprintf(e.stderr, "progressdb %s: %v\n", name, err)
		return threadArgs{}, false
	}
	return threadArgs{tid: fs.Arg(0), asJSON: *j, server: *server}, true
}

// threadConfig loads the configuration of a command on one thread and the
// server it acts through; false: the error was printed (exit 2).
func (e env) threadConfig(name string, a *threadArgs) (config.Config, *slog.Logger, *logging.Sink, bool) {
	cfg, logger, closer, ok := e.configAndLogger()
	if !ok {
		return cfg, nil, nil, false
	}
	if a.server, ok = e.serverOf(name, a.server, cfg); !ok {
		closer.Close()
		return cfg, nil, nil, false
	}
	return cfg, logger, closer, true
}

// threadGet prints a thread, deleted or not, with its legal hold, its
// retention override and the policy in force for it: through the admin
// API when a server runs, from the database directly otherwise.
func (e env) threadGet(ctx context.Context, args []string) int {
	const name = "thread get"
	a, ok := e.threadArg(name, args)
	if !ok {
		return exitUsage
	}
	cfg, logger, closer, ok := e.threadConfig(name, &a)
	if !ok {
		return exitUsage
	}
	defer closer.Close()

	tid := a.tid
	var rep threadReport
	var code int
	rep.Database, code = e.onDatabase(ctx, cfg, logger, name, a.server,
		func(st *store.Store) error {
			t, err := st.GetThread(ctx, tid)
			if err != nil {
				return purgedHint(err, tid)
			}
			rep.Thread = wire.ThreadOf(t)
			return onLocalRetention(ctx, st, cfg, logger, func(m *retention.Manager) (err error) {
				rep.Retention, err = m.ThreadPolicy(ctx, tid)
				return err
			})
		},
		func(c *adminClient) error {
			if err := c.do(ctx, http.MethodGet, "/admin/threads/"+tid, nil, &rep.Thread); err != nil {
				return purgedHint(err, tid)
			}
			return c.do(ctx, http.MethodGet, "/admin/threads/"+tid+"/retention", nil, &rep.Retention)
		})
	if code != exitOK {
		return code
	}
	if a.asJSON {
		writeJSON(e.stdout, rep)
		return exitOK
	}
	printDatabase(e.stdout, rep.Database)
	printThread(e.stdout, rep.Thread)
	printPolicy(e.stdout, rep.Retention)
	return exitOK
}

// purgedHint adds to a "not found" where to look next: a purged thread
// is gone from the database, and only the audit trail remembers it.
func purgedHint(err error, tid string) error {
	var ae *adminError
	if errors.Is(err, store.ErrNotFound) || (errors.As(err, &ae) && ae.Status == http.StatusNotFound) {
		return fmt.Errorf("%w; if it was purged, 'progressdb audit find %s' says when and why", err, tid)
	}
	return err
}

func printThread(w io.Writer, t wire.Thread) {
	yesNo := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	fmt.Fprintf(w, "%-16s %s\n", "thread:", t.ID)
	fmt.Fprintf(w, "%-16s %s\n", "title:", t.Title)
	fmt.Fprintf(w, "%-16s %s\n", "author:", t.Author)
	fmt.Fprintf(w, "%-16s %s\n", "created:", shownTime(t.CreatedTS))
	fmt.Fprintf(w, "%-16s %s\n", "updated:", shownTime(t.UpdatedTS))
	deleted := "no"
	if t.Deleted {
		deleted = "yes, at " + shownTime(t.DeletedTS)
	}
	fmt.Fprintf(w, "%-16s %s\n", "deleted:", deleted)
	fmt.Fprintf(w, "%-16s %s\n", "legal hold:", yesNo(t.LegalHold))
}

// legalHoldSet puts a thread under legal hold (hold=true) or releases it.
func (e env) legalHoldSet(ctx context.Context, args []string, hold bool) int {
	name := "legal-hold clear"
	if hold {
		name = "legal-hold set"
	}
	a, ok := e.threadArg(name, args)
	if !ok {
		return exitUsage
	}
	cfg, logger, closer, ok := e.threadConfig(name, &a)
	if !ok {
		return exitUsage
	}
	defer closer.Close()

	tid := a.tid
	var t wire.Thread
	db, code := e.onDatabase(ctx, cfg, logger, name, a.server,
		func(st *store.Store) error {
			th, err := st.SetLegalHold(ctx, tid, hold)
			t = wire.ThreadOf(th)
			return err
		},
		func(c *adminClient) error {
			return c.do(ctx, http.MethodPut, "/admin/threads/"+tid+"/legal_hold", map[string]bool{"legal_hold": hold}, &t)
		})
	if code != exitOK {
		return code
	}
	if a.asJSON {
		writeJSON(e.stdout, struct {
			Database database `json:"database"`
			wire.Thread
		}{db, t})
		return exitOK
	}
	printDatabase(e.stdout, db)
	printThread(e.stdout, t)
	return exitOK
}

// legalHoldList prints every thread on legal hold, deleted or not.
func (e env) legalHoldList(ctx context.Context, args []string) int {
	const name = "legal-hold list"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	server := serverFlag(fs)
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	cfg, logger, closer, ok := e.configAndLogger()
	if !ok {
		return exitUsage
	}
	defer closer.Close()
	if *server, ok = e.serverOf(name, *server, cfg); !ok {
		return exitUsage
	}

	var held struct {
		Database database      `json:"database"`
		Threads  []wire.Thread `json:"threads"`
	}
	var code int
	held.Database, code = e.onDatabase(ctx, cfg, logger, name, *server,
		func(st *store.Store) error {
			threads, err := st.LegalHolds(ctx)
			for _, t := range threads {
				held.Threads = append(held.Threads, wire.ThreadOf(t))
			}
			return err
		},
		func(c *adminClient) error {
			return c.do(ctx, http.MethodGet, "/admin/legal_holds", nil, &held)
		})
	if code != exitOK {
		return code
	}
	if held.Threads == nil {
		held.Threads = []wire.Thread{}
	}
	if *asJSON {
		writeJSON(e.stdout, held)
		return exitOK
	}
	printDatabase(e.stdout, held.Database)
	if len(held.Threads) == 0 {
		fmt.Fprintln(e.stdout, "no thread is on legal hold")
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "THREAD\tDELETED\tUPDATED")
	for _, t := range held.Threads {
		deleted := "no"
		if t.Deleted {
			deleted = shownTime(t.DeletedTS)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.ID, deleted, shownTime(t.UpdatedTS))
	}
	tw.Flush()
	return exitOK
}
