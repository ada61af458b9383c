// Command progressdb-dev-etcd runs a single-member etcd on loopback for
// trying cluster mode on one machine (make cluster-demo). It is a
// development tool: one member, no TLS, no authentication. Production
// clusters use an etcd the operator runs (docs/cluster.md). It is a binary
// of its own so that the progressdb binary carries no etcd server.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("progressdb-dev-etcd", flag.ContinueOnError)
	dir := fs.String("dir", "", "data folder (required; created when missing)")
	client := fs.String("listen", "127.0.0.1:2379", "client address, loopback only")
	peer := fs.String("peer", "127.0.0.1:2380", "peer address, loopback only")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: progressdb-dev-etcd --dir DIR [--listen 127.0.0.1:2379] [--peer 127.0.0.1:2380]")
		return 2
	}
	for _, a := range []string{*client, *peer} {
		if !loopback(a) {
			fmt.Fprintf(os.Stderr, "progressdb-dev-etcd: %s is not a loopback address: this etcd has no TLS and no authentication\n", a)
			return 2
		}
	}
	cfg := embed.NewConfig()
	cfg.Name = "dev"
	cfg.Dir = *dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cu := url.URL{Scheme: "http", Host: *client}
	pu := url.URL{Scheme: "http", Host: *peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "progressdb-dev-etcd: %v\n", err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "progressdb-dev-etcd: %v\n", err)
		return 1
	case <-time.After(time.Minute):
		fmt.Fprintln(os.Stderr, "progressdb-dev-etcd: not ready after a minute")
		return 1
	}
	// The line a script waits for.
	fmt.Printf("etcd ready: PROGRESSDB_CLUSTER_ETCD=http://%s\n", e.Clients[0].Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
		return 0
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "progressdb-dev-etcd: %v\n", err)
		return 1
	}
}

// loopback reports whether addr's host is a loopback IP or localhost.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
