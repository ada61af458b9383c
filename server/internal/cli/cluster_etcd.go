package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// clusterTimeout bounds one command's calls to etcd: an unreachable etcd
// fails the command instead of hanging it.
const clusterTimeout = 15 * time.Second

// loadClusterConfig loads the configuration of a cluster command, which
// needs the cluster's etcd; false means the error was printed.
func (e env) loadClusterConfig(name string) (config.Config, bool) {
	cfg, ok := e.loadConfig()
	if !ok {
		return cfg, false
	}
	if !cfg.Cluster.Enabled() {
		fmt.Fprintf(e.stderr, "progressdb %s: set %s to the cluster's etcd endpoints\n", name, config.VarClusterEtcd)
		return cfg, false
	}
	return cfg, true
}

// dialCluster connects to the cluster's etcd; on error it prints why and
// returns the exit status (2 for a TLS file that is not one).
func (e env) dialCluster(cfg config.Config, name string) (*clientv3.Client, int) {
	c, err := app.EtcdClient(cfg.Cluster)
	var startErr *app.StartupError
	switch {
	case errors.As(err, &startErr):
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", err)
		return nil, exitUsage
	case err != nil:
		fmt.Fprintf(e.stderr, "progressdb %s: %v\n", name, err)
		return nil, exitFailed
	}
	return c, exitOK
}

// onCluster runs fn against the cluster's etcd within clusterTimeout and
// prints its error, naming the command.
func (e env) onCluster(ctx context.Context, cfg config.Config, name string,
	fn func(ctx context.Context, c *clientv3.Client, k cluster.Keys) error) int {
	c, code := e.dialCluster(cfg, name)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, clusterTimeout)
	defer cancel()
	if err := fn(ctx, c, cluster.Keys{Name: cfg.Cluster.ClusterName}); err != nil {
		e.clusterError(cfg, name, err)
		return exitFailed
	}
	return exitOK
}

// clusterError prints an error of a call to etcd.
func (e env) clusterError(cfg config.Config, name string, err error) {
	if errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintf(e.stderr, "progressdb %s: etcd at %s did not answer within %s\n", name, cfg.Cluster.Etcd, clusterTimeout)
		return
	}
	fmt.Fprintf(e.stderr, "progressdb %s: %v\n", name, err)
}
