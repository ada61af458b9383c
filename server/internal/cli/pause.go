package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/retention"
)

// retentionPause pauses (pause=true) or resumes retention: through the
// admin API when a server runs, on the database directly otherwise.
func (e env) retentionPause(ctx context.Context, args []string, pause bool) int {
	name := "retention resume"
	if pause {
		name = "retention pause"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	reason := new(string)
	if pause {
		reason = fs.String("reason", "", "why retention is paused (shown by status)")
	}
	asJSON := fs.Bool("json", false, "print the pause state as JSON")
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

	var st retention.PauseState
	var code int
	var db database
	if cfg.Cluster.Enabled() && *server == "" {
		// Pause is cluster-wide (spec §11): the switch is in etcd, where
		// every node's shards read it.
		code = e.onCluster(ctx, cfg, name, func(ctx context.Context, c *clientv3.Client, k cluster.Keys) error {
			p, err := (&cluster.Pause{Client: c, Keys: k}).Set(ctx, pause, *reason)
			st = retention.PauseStateOf(p)
			return err
		})
		db = database{Node: true, Path: "the cluster's etcd (" + cfg.Cluster.Etcd + ")"}
	} else {
		db, code = e.onRetention(ctx, cfg, logger, name, *server,
			func(m *retention.Manager) (err error) {
				st, err = m.SetPause(ctx, pause, *reason)
				return err
			},
			func(c *adminClient) error {
				in := map[string]any{"paused": pause}
				if *reason != "" {
					in["reason"] = *reason
				}
				return c.do(ctx, http.MethodPut, "/admin/retention/pause", in, &st)
			})
	}
	if code != exitOK {
		return code
	}
	if *asJSON {
		writeJSON(e.stdout, struct {
			Database database `json:"database"`
			retention.PauseState
		}{db, st})
		return exitOK
	}
	printDatabase(e.stdout, db)
	printPause(e.stdout, st)
	return exitOK
}

func printPause(w io.Writer, st retention.PauseState) {
	if !st.Paused {
		fmt.Fprintln(w, "paused:          no")
		return
	}
	line := "paused:          yes"
	if !st.PausedAt.IsZero() {
		line += " since " + st.PausedAt.Format(time.RFC3339)
	}
	if st.Reason != "" {
		line += fmt.Sprintf(" (reason: %s)", st.Reason)
	}
	fmt.Fprintln(w, line)
}
