package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/progressdb/progressdb/server/internal/cluster"
)

// clusterMoveShard moves shard N to node --to through the node at
// PROGRESSDB_ADDR (POST /admin/cluster/shards/{n}/move), which hands the
// move to the target. Exit 0 moved, 1 refused or failed (the shard stays
// where it was unless the hand-over happened), 2 usage.
func (e env) clusterMoveShard(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("cluster move-shard", flag.ContinueOnError)
	to := fs.String("to", "", "the node the shard moves to (required; it must be running)")
	asJSON := fs.Bool("json", false, "print what moved as JSON")
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	n, err := strconv.Atoi(fs.Arg(0))
	if fs.NArg() != 1 || err != nil || n < 0 || *to == "" {
		fmt.Fprintln(e.stderr, "usage: progressdb cluster move-shard N --to NODE [--json]")
		return exitUsage
	}
	cfg, ok := e.loadClusterConfig("cluster move-shard")
	if !ok {
		return exitUsage
	}
	c, err := newAdminClient(cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb cluster move-shard: %v\n", err)
		return exitUsage
	}
	var res cluster.MoveResult
	// A move lasts as long as the copy of the shard: ctx bounds it.
	err = c.untimed().do(ctx, "POST", "/admin/cluster/shards/"+strconv.Itoa(n)+"/move", map[string]string{"to": *to}, &res)
	var ae *adminError
	switch {
	case errors.As(err, &ae):
		fmt.Fprintf(e.stderr, "progressdb cluster move-shard: shard %d not moved: %s\n", n, ae.Msg)
		return exitFailed
	case err != nil:
		fmt.Fprintf(e.stderr, "progressdb cluster move-shard: %v\n", err)
		return exitFailed
	}
	if *asJSON {
		writeJSON(e.stdout, res)
	} else {
		printMove(e.stdout, res)
	}
	if !res.Removed {
		fmt.Fprintf(e.stderr, "progressdb cluster move-shard: shard %d moved, but node %s could not delete its copy: %s\n", n, res.From, res.RemoveErr)
		return exitFailed
	}
	return exitOK
}

func printMove(w io.Writer, r cluster.MoveResult) {
	if r.Epoch == 0 { // a replicated shard's: no ownership, nothing restored
		fmt.Fprintf(w, "moved:     shard %d's replica from %s to %s (added as a learner, caught up, promoted)\n", r.Shard, r.From, r.To)
		if r.Removed {
			fmt.Fprintf(w, "old copy:  removed from the group; %s deletes its folder\n", r.From)
		}
		return
	}
	fmt.Fprintf(w, "moved:     shard %d from %s to %s\n", r.Shard, r.From, r.To)
	fmt.Fprintf(w, "epoch:     %d (the old copy was fenced at %d)\n", r.Epoch, r.OldEpoch)
	fmt.Fprintf(w, "contents:  %d threads, %d messages (backup %s)\n", r.Threads, r.Messages, r.BackupID)
	fmt.Fprintf(w, "replayed:  %d purges\n", r.Replayed)
	if r.Removed {
		fmt.Fprintf(w, "old copy:  deleted on %s, recorded in its audit trail\n", r.From)
	}
}
