package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
)

// clusterSetReplicas records a new replica count for every shard of a
// running cluster in etcd (cluster.SetReplicas, over the nodes
// registered now); each shard's leader then adds or removes its group's
// replicas one at a time, and the home of a shard of one copy first
// makes it a group. Exit 0 recorded, 1 refused or failed, 2 usage.
func (e env) clusterSetReplicas(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("cluster set-replicas", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the shard map's replica sets as JSON")
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	r, err := strconv.Atoi(fs.Arg(0))
	if fs.NArg() != 1 || err != nil || r < 1 {
		fmt.Fprintln(e.stderr, "usage: progressdb cluster set-replicas N [--json]")
		return exitUsage
	}
	cfg, ok := e.loadClusterConfig("cluster set-replicas")
	if !ok {
		return exitUsage
	}
	var m cluster.Map
	code := e.onCluster(ctx, cfg, "cluster set-replicas", func(ctx context.Context, c *clientv3.Client, k cluster.Keys) error {
		live, err := cluster.LiveNodes(ctx, c, k)
		if err != nil {
			return err
		}
		m, err = cluster.SetReplicas(ctx, c, k, r, live)
		return err
	})
	if code != exitOK {
		return code
	}
	if *asJSON {
		writeJSON(e.stdout, m.Sets)
		return exitOK
	}
	printSets(e.stdout, m)
	return exitOK
}

// printSets prints each shard's replica set.
func printSets(w io.Writer, m cluster.Map) {
	fmt.Fprintf(w, "replicas: %d per shard; the shards' leaders add and remove them one at a time\n", m.ReplicaCount())
	for n, home := range m.Homes {
		fmt.Fprintf(w, "shard %d:", n)
		if !m.Grouped(n) {
			state := "one copy, owned by its home"
			if m.Growing(n) {
				state += ", which makes it a group"
			}
			fmt.Fprintf(w, " %s (%s)\n", home, state)
			continue
		}
		set := m.Sets[n]
		for _, r := range set {
			state := ""
			switch {
			case r.Leaving:
				state = " (leaving)"
			case r.Added:
				state = " (joining)"
			}
			fmt.Fprintf(w, " %s#%d%s", r.Node, r.ID, state)
		}
		fmt.Fprintln(w)
	}
}
