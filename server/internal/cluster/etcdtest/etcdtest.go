// Package etcdtest starts a real etcd server inside a test process, on
// loopback, for the tests of everything that coordinates through etcd. It
// is imported by tests only, so the product binary carries no etcd server.
package etcdtest

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/progressdb/progressdb/server/internal/testtools/tcpproxy"
)

// startWait bounds how long a server may take to become ready; it is a
// guard against a hang, not a speed claim.
const startWait = 60 * time.Second

// Server is one embedded etcd member, stopped when the test ends. Clients
// reach it through a proxy that Partition cuts.
type Server struct {
	e      *embed.Etcd
	direct []string // the member's own client URLs
	proxy  *tcpproxy.Proxy
}

// Start starts a single-member etcd in a temporary folder, listening on
// free loopback ports, and waits until it serves.
func Start(t testing.TB) *Server {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	// Its shutdown logs errors about closed listeners; tests read their own.
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// Port 0: the kernel picks free ports, so parallel tests never clash.
	client := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	s := &Server{e: e}
	t.Cleanup(s.Stop)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("embedded etcd failed: %v", err)
	case <-time.After(startWait):
		t.Fatalf("embedded etcd not ready after %s", startWait)
	}
	for _, l := range e.Clients {
		s.direct = append(s.direct, "http://"+l.Addr().String())
	}
	p, err := tcpproxy.New(e.Clients[0].Addr().String())
	if err != nil {
		t.Fatalf("etcd proxy: %v", err)
	}
	s.proxy = p
	t.Cleanup(p.Close)
	return s
}

// Endpoints are the client URLs to dial: the proxy's.
func (s *Server) Endpoints() []string { return []string{"http://" + s.proxy.Addr()} }

// Client returns a client through the proxy, closed when the test ends.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return s.client(t, s.Endpoints())
}

func (s *Server) client(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := NewClient(endpoints)
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// DirectClient returns a client that Partition does not cut off.
func (s *Server) DirectClient(t testing.TB) *clientv3.Client {
	t.Helper()
	return s.client(t, s.direct)
}

// Partition cuts every client connected through the proxy off the server,
// which goes on serving: their leases expire in etcd after their TTL.
func (s *Server) Partition() { s.proxy.Cut() }

// NewClient dials endpoints with the settings tests use.
func NewClient(endpoints []string) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("dial %v: %w", endpoints, err)
	}
	return c, nil
}

// Stop stops the server, as a lost quorum does. It takes a few seconds
// when clients hold streams open. Stopping twice does nothing.
func (s *Server) Stop() {
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}

// Revoke revokes a lease from outside its holder, which is what etcd does
// when the lease's TTL runs out: every key attached to it is deleted.
func (s *Server) Revoke(t testing.TB, id clientv3.LeaseID) {
	t.Helper()
	c := s.client(t, s.direct)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Revoke(ctx, id); err != nil {
		t.Fatalf("revoke lease %x: %v", int64(id), err)
	}
}
