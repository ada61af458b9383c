package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

func (e env) policyGet(ctx context.Context, args []string) int {
	return e.retentionPolicy(ctx, "get", args)
}

func (e env) policySet(ctx context.Context, args []string) int {
	return e.retentionPolicy(ctx, "set", args)
}

func (e env) policyClear(ctx context.Context, args []string) int {
	return e.retentionPolicy(ctx, "clear", args)
}

// retentionPolicy reads, replaces or removes a thread's retention override:
// through the admin API when a server runs, on the database directly
// otherwise. `set` replaces the whole override with the flags given.
func (e env) retentionPolicy(ctx context.Context, action string, args []string) int {
	fs := flag.NewFlagSet("retention policy "+action, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the policy as JSON")
	server := serverFlag(fs)
	var o retention.PolicyOverride
	if action == "set" {
		overrideFlags(fs, &o)
	}
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(e.stderr, "progressdb %s: give one thread ID\n", fs.Name())
		return exitUsage
	}
	tid := fs.Arg(0)
	if err := store.ValidateID(tid); err != nil {
		fmt.Fprintf(e.stderr, "progressdb %s: %v\n", fs.Name(), err)
		return exitUsage
	}
	if action == "set" && o == (retention.PolicyOverride{}) {
		fmt.Fprintf(e.stderr, "progressdb %s: give at least one of --period, --message-period, --max-age, --max-messages "+
			"(retention policy clear removes the override)\n", fs.Name())
		return exitUsage
	}
	cfg, logger, closer, ok := e.configAndLogger()
	if !ok {
		return exitUsage
	}
	defer closer.Close()
	if *server, ok = e.serverOf(fs.Name(), *server, cfg); !ok {
		return exitUsage
	}

	p, db, code := e.applyPolicy(ctx, cfg, logger, fs.Name(), *server, action, tid, o)
	if code != exitOK {
		return code
	}
	if *asJSON {
		writeJSON(e.stdout, struct {
			Database database `json:"database"`
			retention.ThreadPolicy
		}{db, p})
		return exitOK
	}
	printDatabase(e.stdout, db)
	printPolicy(e.stdout, p)
	return exitOK
}

// overrideFlags defines the flags of `retention policy set` on fs, each
// setting its field of o.
func overrideFlags(fs *flag.FlagSet, o *retention.PolicyOverride) {
	// Durations are checked for their syntax here (a usage error); the
	// rules of the configuration in force (the minimum period) are the
	// server's or the database's to apply.
	duration := func(to **string) func(string) error {
		return func(v string) error {
			if _, err := config.ParseDuration(v); err != nil {
				return err
			}
			*to = &v
			return nil
		}
	}
	fs.Func("period", "thread retention after soft delete (e.g. 30d)", duration(&o.Period))
	fs.Func("message-period", "message retention after soft delete", duration(&o.MessagePeriod))
	fs.Func("max-age", "purge live messages older than this; 0 turns it off for the thread", duration(&o.MaxAge))
	fs.Func("max-messages", "keep at most this many live messages; 0 turns it off for the thread", func(v string) error {
		n, err := parseCount(v)
		if err != nil {
			return err
		}
		o.MaxMessages = &n
		return nil
	})
}

// applyPolicy runs action (get, set, clear) on thread tid's override,
// through server when one runs, on the database otherwise, and returns the
// policy in force after it.
func (e env) applyPolicy(ctx context.Context, cfg config.Config, logger *slog.Logger, name, server, action, tid string,
	o retention.PolicyOverride) (retention.ThreadPolicy, database, int) {
	var p retention.ThreadPolicy
	path := "/admin/threads/" + tid + "/retention"
	db, code := e.onRetention(ctx, cfg, logger, name, server,
		func(m *retention.Manager) (err error) {
			switch action {
			case "get":
				p, err = m.ThreadPolicy(ctx, tid)
			case "set":
				p, err = m.SetThreadPolicy(ctx, tid, o)
			default:
				if err = m.ClearThreadPolicy(ctx, tid); err == nil {
					p, err = m.ThreadPolicy(ctx, tid)
				}
			}
			return err
		},
		func(c *adminClient) error {
			switch action {
			case "get":
				return c.do(ctx, http.MethodGet, path, nil, &p)
			case "set":
				return c.do(ctx, http.MethodPut, path, o, &p)
			default:
				if err := c.do(ctx, http.MethodDelete, path, nil, nil); err != nil {
					return err
				}
				return c.do(ctx, http.MethodGet, path, nil, &p)
			}
		})
	return p, db, code
}

func printPolicy(w io.Writer, p retention.ThreadPolicy) {
	show := func(name string, set *string, effective string) {
		src := "inherited"
		if set != nil {
			src = "override"
		}
		fmt.Fprintf(w, "%-16s %s (%s)\n", name+":", effective, src)
	}
	fmt.Fprintf(w, "%-16s %s\n", "thread:", p.ThreadID)
	show("period", p.Override.Period, p.Effective.Period)
	show("message period", p.Override.MessagePeriod, p.Effective.MessagePeriod)
	show("max age", p.Override.MaxAge, p.Effective.MaxAge)
	var n *string
	if p.Override.MaxMessages != nil {
		n = new(string)
	}
	show("max messages", n, strconv.Itoa(p.Effective.MaxMessages))
}
