package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// clusterTimeout bounds one command's calls to etcd: an unreachable etcd
// fails the command instead of hanging it.
const clusterTimeout = 15 * time.Second

// statusTimeout bounds cluster status, which only reads: an etcd that does
// not answer a read within it is down or unreachable.
const statusTimeout = 5 * time.Second

// loadClusterConfig loads the configuration of a cluster command, which
// needs the cluster's etcd but is no node: PROGRESSDB_NODE_ID,
// PROGRESSDB_ADVERTISE_URL and PROGRESSDB_CLUSTER_SECRET are not required.
// False means the error was printed.
func (e env) loadClusterConfig(name string) (config.Config, bool) {
	cfg, err := config.LoadEtcdClient(e.environ)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", err)
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

// clusterError prints an error of a call to etcd bounded by clusterTimeout.
func (e env) clusterError(cfg config.Config, name string, err error) {
	e.clusterErrorWithin(cfg, name, err, clusterTimeout)
}

// clusterErrorWithin prints an error of a call to etcd bounded by timeout.
func (e env) clusterErrorWithin(cfg config.Config, name string, err error, timeout time.Duration) {
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
		fmt.Fprintf(e.stderr, "progressdb %s: etcd at %s did not answer within %s: is it running and reachable from here? (%s)\n",
			name, cfg.Cluster.Etcd, timeout, config.VarClusterEtcd)
		return
	}
	fmt.Fprintf(e.stderr, "progressdb %s: %v\n", name, err)
}
