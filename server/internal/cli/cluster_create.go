package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// clusterCreateReport is what cluster create prints with --json.
type clusterCreateReport struct {
	Cluster string `json:"cluster"` // PROGRESSDB_CLUSTER_NAME
	Created bool   `json:"created"` // false: it existed with these arguments
	Shards  int    `json:"shards"`
	// Replicas of each shard: 1, or the size of each shard's Raft group.
	Replicas int                 `json:"replicas"`
	Nodes    []clusterCreateNode `json:"nodes"`
}

type clusterCreateNode struct {
	ID     string `json:"id"`
	Shards []int  `json:"shards"` // whose data it holds (a replica of, replicated)
}

// clusterCreate records the shard count (PROGRESSDB_CLUSTER_SHARDS) and
// spreads the shards over the nodes named, once: the same command again
// changes nothing, one with another shard count or other nodes is refused.
func (e env) clusterCreate(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("cluster create", flag.ContinueOnError)
	nodesFlag := fs.String("nodes", "", "the node IDs (PROGRESSDB_NODE_ID) to spread the shards over, comma-separated, in order")
	asJSON := fs.Bool("json", false, "print the shard map as JSON")
	replicas := fs.Int("replicas", 1, "replicas of each shard: 1, or 3 or 5 Raft replicas on distinct nodes (spec §15)")
	wait := fs.Duration("wait", defaultCreateWait, "how long to wait for every node named to report the shards it holds (a node reports at start)")
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	nodes, err := parseNodes(*nodesFlag)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb cluster create: --nodes: %v\n", err)
		e.flagsHint(fs)
		return exitUsage
	}
	if err := cluster.CheckReplicas(*replicas, len(nodes)); err != nil {
		fmt.Fprintf(e.stderr, "progressdb cluster create: --replicas: %v\n", err)
		return exitUsage
	}
	cfg, ok := e.loadClusterConfig("cluster create")
	if !ok {
		return exitUsage
	}
	c, code := e.dialCluster(cfg, "cluster create")
	if c == nil {
		return code
	}
	defer c.Close()
	if *wait < 0 {
		fmt.Fprintf(e.stderr, "progressdb cluster create: --wait %s: must not be negative\n", *wait)
		return exitUsage
	}
	k := cluster.Keys{Name: cfg.Cluster.ClusterName}
	if code, ok := e.waitReports(ctx, c, cfg, k, nodes, *wait); !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(ctx, clusterTimeout)
	defer cancel()
	m, created, err := cluster.EnsureReplicated(ctx, c, k, cfg.Cluster.Shards, *replicas, nodes)
	if err != nil {
		return e.createFailed(cfg, k, err)
	}
	if code, ok := e.createReceiptKey(ctx, cfg, c, k); !ok {
		return code
	}
	rep := clusterCreateReport{Cluster: k.Name, Created: created, Shards: m.Shards, Replicas: m.ReplicaCount()}
	for _, id := range nodes {
		rep.Nodes = append(rep.Nodes, clusterCreateNode{ID: id, Shards: append([]int{}, m.HeldBy(id)...)})
	}
	if *asJSON {
		writeJSON(e.stdout, rep)
		return exitOK
	}
	printClusterCreate(e.stdout, rep)
	return exitOK
}

// createFailed prints why EnsureReplicated refused and returns the exit
// status.
func (e env) createFailed(cfg config.Config, k cluster.Keys, err error) int {
	var countErr *cluster.ShardCountError
	var twice *cluster.ShardHeldTwiceError
	var replicaErr *cluster.ReplicaCountError
	switch {
	case errors.As(err, &twice):
		fmt.Fprintf(e.stderr, "progressdb cluster create: %v\n", twice)
	case errors.Is(err, cluster.ErrShardBeyondCount):
		fmt.Fprintf(e.stderr, "progressdb cluster create: %v (%s)\n", err, config.VarClusterShards)
	case errors.As(err, &countErr):
		fmt.Fprintf(e.stderr, "progressdb cluster create: cluster %q exists with %d shards, not %d (%s): the shard count is fixed when a cluster is created\n",
			k.Name, countErr.Recorded, countErr.Asked, config.VarClusterShards)
	case errors.As(err, &replicaErr):
		fmt.Fprintf(e.stderr, "progressdb cluster create: cluster %q exists with %d replicas per shard, not %d: the replica count is fixed when a cluster is created\n",
			k.Name, replicaErr.Recorded, replicaErr.Asked)
	case errors.Is(err, cluster.ErrReplicaCount):
		fmt.Fprintf(e.stderr, "progressdb cluster create: --replicas: %v\n", err)
		return exitUsage
	case errors.Is(err, cluster.ErrReplicatedHeld):
		fmt.Fprintf(e.stderr, "progressdb cluster create: %v; nothing was created\n", err)
	case errors.Is(err, cluster.ErrClusterNodes):
		fmt.Fprintf(e.stderr, "progressdb cluster create: cluster %q exists: %v; its shards are spread already (a shard moves with POST /admin/cluster/shards/{n}/move)\n", k.Name, err)
	default:
		e.clusterError(cfg, "cluster create", err)
	}
	return exitFailed
}

// createReceiptKey creates the cluster's receipt key in etcd, wrapped by
// PROGRESSDB_KEK, when one is set (spec §11.1); a cluster that has one
// keeps it. false: the exit status to return.
func (e env) createReceiptKey(ctx context.Context, cfg config.Config, c *clientv3.Client, k cluster.Keys) (int, bool) {
	key, err := app.ClusterReceiptKey(ctx, cfg, c, k)
	clear(key)
	var startErr *app.StartupError
	switch {
	case errors.As(err, &startErr):
		fmt.Fprintf(e.stderr, "progressdb cluster create: %v\n", err)
		return exitUsage, false
	case err != nil:
		e.clusterError(cfg, "cluster create", err)
		return exitFailed, false
	}
	return exitOK, true
}

// defaultCreateWait bounds how long cluster create waits for the nodes to
// report what they hold: long enough for a deployment to start them all.
const defaultCreateWait = 5 * time.Minute

// waitReports waits, unless the cluster exists already, until every node
// named has reported the shards it holds, which the map is built from
// (after an etcd loss, the shards are where the nodes hold them, not
// where the round robin would put them). false: the exit status to
// return.
func (e env) waitReports(ctx context.Context, c *clientv3.Client, cfg config.Config, k cluster.Keys, nodes []string,
	wait time.Duration) (int, bool) {
	rctx, cancel := context.WithTimeout(ctx, clusterTimeout)
	_, err := cluster.ReadMap(rctx, c, k)
	cancel()
	switch {
	case err == nil:
		return exitOK, true // created: EnsureCluster compares
	case !errors.Is(err, cluster.ErrNoCluster):
		e.clusterError(cfg, "cluster create", err)
		return exitFailed, false
	}
	// Each read of etcd is bounded as the command's other calls are.
	wctx, cancel := context.WithTimeout(ctx, wait+clusterTimeout)
	defer cancel()
	_, err = cluster.WaitReports(wctx, c, k, nodes, wait, func(missing []string) {
		fmt.Fprintf(e.stderr, "progressdb cluster create: waiting up to %s for each node to report the shards it holds (a node reports when it starts); not yet: %s\n",
			wait, strings.Join(missing, ", "))
	})
	var unreported *cluster.UnreportedError
	switch {
	case errors.As(err, &unreported):
		fmt.Fprintf(e.stderr, "progressdb cluster create: %v, then run cluster create again; nothing was created\n", err)
		return exitFailed, false
	case err != nil:
		e.clusterError(cfg, "cluster create", err)
		return exitFailed, false
	}
	return exitOK, true
}

// parseNodes reads --nodes: distinct valid node IDs.
func parseNodes(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("required: the node IDs to spread the shards over, such as --nodes node-1,node-2,node-3")
	}
	var nodes []string
	for _, id := range strings.Split(s, ",") {
		id = strings.TrimSpace(id)
		switch {
		case !config.ValidNodeID(id):
			return nil, fmt.Errorf("%q is not a node ID (1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit)", id)
		case slices.Contains(nodes, id):
			return nil, fmt.Errorf("node %q named twice", id)
		}
		nodes = append(nodes, id)
	}
	return nodes, nil
}

func printClusterCreate(w io.Writer, rep clusterCreateReport) {
	if rep.Created {
		fmt.Fprintf(w, "cluster %q created: %d shards over %d nodes\n", rep.Cluster, rep.Shards, len(rep.Nodes))
		if rep.Replicas > 1 {
			fmt.Fprintf(w, "each shard is a Raft group of %d replicas on distinct nodes\n", rep.Replicas)
		}
	} else {
		fmt.Fprintf(w, "cluster %q exists with these %d shards and nodes: nothing changed\n", rep.Cluster, rep.Shards)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSHARDS")
	for _, n := range rep.Nodes {
		s := make([]string, len(n.Shards))
		for i, x := range n.Shards {
			s[i] = strconv.Itoa(x)
		}
		if len(s) == 0 {
			s = []string{"-"}
		}
		fmt.Fprintf(tw, "%s\t%s\n", n.ID, strings.Join(s, ","))
	}
	tw.Flush()
}
