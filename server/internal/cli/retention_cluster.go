package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/router"
)

// On a cluster node PROGRESSDB_DB_PATH holds shards, not one database, and
// a shard's runs belong to its owner: retention run and status go through
// the admin API of a node (PROGRESSDB_ADDR, or --server), which answers
// for every shard (each on its owner).

// clusterRetentionRun runs every shard's retention at once and prints each
// shard's summary. Exit 0 when every shard completed, 1 otherwise.
func (e env) clusterRetentionRun(ctx context.Context, c *adminClient, dryRun, asJSON bool) int {
	var out router.ClusterRetention
	if err := c.untimed().do(ctx, http.MethodPost, "/admin/retention/run", map[string]bool{"dry_run": dryRun}, &out); err != nil {
		fmt.Fprintf(e.stderr, "progressdb retention run: %v\n", err)
		return exitFailed
	}
	code := exitOK
	for _, s := range out.Shards {
		if s.Code != http.StatusOK || s.Result == nil || s.Result.Status != audit.RunCompleted {
			code = exitFailed
		}
	}
	if asJSON {
		writeJSON(e.stdout, out)
	} else {
		printDatabase(e.stdout, database{Node: true, Server: c.base})
		printClusterRuns(e.stdout, out)
	}
	if code != exitOK {
		fmt.Fprintln(e.stderr, "progressdb retention run: not every shard completed its run (see each shard's status)")
	}
	return code
}

func printClusterRuns(w io.Writer, out router.ClusterRetention) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tNODE\tSTATUS\tSCANNED\tELIGIBLE\tPURGED\tFAILED\tAUDIT FILE")
	for _, s := range out.Shards {
		if s.Result == nil {
			fmt.Fprintf(tw, "%d\t%s\t%d: %s\t\t\t\t\t\n", s.Shard, s.Node, s.Code, s.Error)
			continue
		}
		r := s.Result
		status := r.Status
		if r.DryRun {
			status += " (dry run)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", s.Shard, s.Node, status, r.Scanned, r.Eligible, r.Purged, r.Failed, r.AuditFile)
	}
	tw.Flush()
}

// clusterRetentionStatus prints every shard's retention status. Exit 0
// when every shard answered, 1 otherwise.
func (e env) clusterRetentionStatus(ctx context.Context, c *adminClient, asJSON bool) int {
	var out router.ClusterRetention
	if err := c.do(ctx, http.MethodGet, "/admin/retention", nil, &out); err != nil {
		fmt.Fprintf(e.stderr, "progressdb retention status: %v\n", err)
		return exitFailed
	}
	code := exitOK
	for _, s := range out.Shards {
		if s.Code != http.StatusOK || s.Status == nil {
			code = exitFailed
		}
	}
	if asJSON {
		writeJSON(e.stdout, out)
		return code
	}
	printDatabase(e.stdout, database{Node: true, Server: c.base})
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tNODE\tENABLED\tPAUSED\tNEXT RUN\tLAST RUN\tLAST PURGED")
	for _, s := range out.Shards {
		st := s.Status
		if st == nil {
			fmt.Fprintf(tw, "%d\t%s\t%d: %s\t\t\t\t\n", s.Shard, s.Node, s.Code, s.Error)
			continue
		}
		next, last, purged := "-", "-", "-"
		if !st.NextRun.IsZero() {
			next = st.NextRun.UTC().Format(time.RFC3339)
		}
		if st.LastRun != nil {
			last, purged = st.LastRun.Status+" "+st.LastRun.StartedAt.UTC().Format(time.RFC3339), strconv.FormatInt(st.LastRun.Purged, 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Shard, s.Node, yesNo(st.Enabled), yesNo(st.Paused), next, last, purged)
	}
	tw.Flush()
	return code
}
