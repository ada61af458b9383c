package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/progressdb/progressdb/server/internal/cluster"
)

// clusterStatusReport is what cluster status prints with --json: the
// answer of GET /admin/cluster, read from etcd, so that it works whether
// or not any node runs.
type clusterStatusReport struct {
	Cluster string `json:"cluster"` // PROGRESSDB_CLUSTER_NAME
	cluster.Status
}

// clusterStatus prints the cluster's nodes (alive, URL, shards held) and
// shards (home, owner, epoch, state), and a replicated cluster's replicas
// (role, applied index, lag), as etcd has them now.
func (e env) clusterStatus(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("cluster status", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the status as JSON")
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	cfg, ok := e.loadClusterConfig("cluster status")
	if !ok {
		return exitUsage
	}
	c, code := e.dialCluster(cfg, "cluster status")
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	k := cluster.Keys{Name: cfg.Cluster.ClusterName}
	st, err := cluster.ReadStatus(ctx, c, k)
	switch {
	case errors.Is(err, cluster.ErrNoCluster):
		fmt.Fprintf(e.stderr, "progressdb cluster status: cluster %q has not been created: run progressdb cluster create --nodes ID,ID,...\n", k.Name)
		return exitFailed
	case err != nil:
		e.clusterErrorWithin(cfg, "cluster status", err, statusTimeout)
		return exitFailed
	}
	rep := clusterStatusReport{Cluster: k.Name, Status: st}
	if *asJSON {
		writeJSON(e.stdout, rep)
		return exitOK
	}
	printClusterStatus(e.stdout, rep)
	return exitOK
}

func printClusterStatus(w io.Writer, rep clusterStatusReport) {
	owned, under, replicated := 0, 0, false
	for _, s := range rep.Shards {
		if s.State == cluster.ShardOwned {
			owned++
		}
		if s.UnderReplicated {
			under++
		}
		replicated = replicated || len(s.Replicas) > 0
	}
	fmt.Fprintf(w, "cluster %q: %d shards, %d owned, %d unavailable", rep.Cluster, len(rep.Shards), owned, len(rep.Shards)-owned)
	if replicated {
		fmt.Fprintf(w, ", %d under-replicated", under)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tALIVE\tURL\tSHARDS")
	for _, n := range rep.Nodes {
		url := n.URL
		if url == "" {
			url = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.ID, yesNo(n.Alive), url, intList(n.Shards))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tHOME\tOWNER\tEPOCH\tSTATE")
	for _, s := range rep.Shards {
		owner, epoch := s.Owner, strconv.FormatInt(s.Epoch, 10)
		if owner == "" {
			owner, epoch = "-", "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", s.N, s.Home, owner, epoch, s.State)
	}
	tw.Flush()
	if replicated {
		printReplicas(w, rep.Shards)
	}
}

// printReplicas lists the replicated shards' replicas: the owner above is
// a shard's leader and the epoch its term.
func printReplicas(w io.Writer, shards []cluster.ShardStatus) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tREPLICA\tNODE\tROLE\tAPPLIED\tLAG\tACTIVE")
	for _, s := range shards {
		for _, r := range s.Replicas {
			applied, lag := strconv.FormatUint(r.Applied, 10), strconv.FormatUint(r.Lag, 10)
			if r.Role == cluster.RoleUnknown {
				applied = "-"
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\n", s.N, r.ID, r.Node, r.Role, applied, lag, yesNo(r.Active))
		}
		if s.UnderReplicated {
			fmt.Fprintf(tw, "%d\t-\t-\tunder-replicated\t\t\t\n", s.N)
		}
	}
	tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func intList(ns []int) string {
	if len(ns) == 0 {
		return "-"
	}
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
