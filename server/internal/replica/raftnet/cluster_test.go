package raftnet_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/internal/testcerts"
	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/certs"
	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/replica/raftnet"
	"github.com/progressdb/progressdb/server/internal/replica/replicatest"
	"github.com/progressdb/progressdb/server/internal/router"
	"github.com/progressdb/progressdb/server/internal/testtools/tcpproxy"
	"github.com/progressdb/progressdb/server/pkg/store"
)

const secret = "raftnet-test-secret"

// logBuffer keeps the transports' log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// netNode is one node: its listener's server, transport, host and stores.
type netNode struct {
	reg    *prometheus.Registry
	tr     *raftnet.Transport
	host   *replica.Host
	stores map[uint64]*store.Store
	stop   context.CancelFunc
	served chan error
}

// netCluster runs three nodes, each serving raft streams behind a real
// TLS listener on loopback with certificates of one cluster CA, checked
// by the node routes' guard. Node i reaches node j through proxy[i][j],
// which the test cuts. Replica (g, i) has the Raft ID g*10+i+1.
type netCluster struct {
	replicatest.Nodes
	dir    string
	groups []uint64
	ca     *testcerts.CA
	leaves [3]testcerts.Leaf
	addrs  [3]string
	proxy  [3][3]*tcpproxy.Proxy
	nodes  [3]*netNode
	logs   *logBuffer
	// keep > 0: the groups apply their stores' commands, send and take
	// snapshots, and keep so many applied entries (Config.LogKeep).
	keep int
}

func nodeName(i int) string { return "node" + strconv.Itoa(i) }

func newNetCluster(t *testing.T, groups ...uint64) *netCluster {
	return newNetClusterKeeping(t, 0, groups...)
}

// newNetClusterKeeping is newNetCluster whose groups apply their stores'
// commands and keep keep entries, when keep > 0.
func newNetClusterKeeping(t *testing.T, keep int, groups ...uint64) *netCluster {
	c := &netCluster{dir: t.TempDir(), groups: groups, ca: testcerts.NewCA(t, "cluster CA"), logs: &logBuffer{}, keep: keep}
	c.Nodes = replicatest.Nodes{T: t, SM: make(map[uint64]*replicatest.Recorder), Host: func(i int) *replica.Host {
		if nd := c.nodes[i]; nd != nil {
			return nd.host
		}
		return nil
	}}
	var lns [3]net.Listener
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i], c.addrs[i] = ln, ln.Addr().String()
		c.leaves[i] = c.ca.Issue(t, nodeName(i), testcerts.Options{})
	}
	for i := range c.proxy {
		for j := range c.proxy[i] {
			if i == j {
				continue
			}
			p, err := tcpproxy.New(c.addrs[j])
			if err != nil {
				t.Fatal(err)
			}
			c.proxy[i][j] = p
			t.Cleanup(p.Close)
		}
	}
	for i := range c.nodes {
		c.start(i, lns[i])
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.stop(i)
		}
		if t.Failed() {
			t.Logf("transport logs:\n%s", c.logs)
		}
	})
	return c
}

// serverTLS is a node listener's TLS: its certificate, HTTP/2, and client
// certificates asked for (the guard checks them), as the app serves.
func (c *netCluster) serverTLS(i int) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{c.leaves[i].TLS(c.T)},
		NextProtos: []string{"h2", "http/1.1"}, ClientAuth: tls.RequestClientCert}
}

// guard checks node calls against the cluster CA: every node advertises
// 127.0.0.1.
func (c *netCluster) guard() *certs.Guard {
	return &certs.Guard{Nodes: c.ca.Pool(), NodeCall: router.IsNodeCall, IDs: store.NewIDSource(),
		CallerHost: func(r *http.Request) (string, error) {
			for i := range c.nodes {
				if r.Header.Get(router.HeaderNode) == nodeName(i) {
					return "127.0.0.1", nil
				}
			}
			return "", errors.New("no such node")
		}}
}

// start runs node i on ln (its old address again when nil), from its
// stores on disk.
func (c *netCluster) start(i int, ln net.Listener) {
	c.T.Helper()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", c.addrs[i]); err != nil {
			c.T.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	tr, err := raftnet.New(raftnet.Options{Node: nodeName(i), Secret: secret, Metrics: raftnet.NewMetrics(reg),
		Logger: slog.New(slog.NewTextHandler(c.logs, nil)).With("node", i),
		TLS:    testcerts.ClientConfig(c.ca.Pool(), c.leaves[i].TLS(c.T)),
		Resolve: func(replica uint64) (raftnet.Peer, bool) {
			j := int(replica%10) - 1
			if j < 0 || j > 2 || j == i {
				return raftnet.Peer{}, false
			}
			return raftnet.Peer{Node: nodeName(j), URL: "https://" + c.proxy[i][j].Addr()}, true
		}})
	if err != nil {
		c.T.Fatal(err)
	}
	h, err := replica.NewHost(replica.Config{Transport: tr, Tick: 10 * time.Millisecond, ElectionTicks: 30,
		Logger: slog.New(slog.DiscardHandler), LogKeep: c.keep})
	if err != nil {
		c.T.Fatal(err)
	}
	nd := &netNode{reg: reg, tr: tr, host: h, stores: make(map[uint64]*store.Store), served: make(chan error, 1)}
	ctx, stop := context.WithCancel(context.Background())
	nd.stop = stop
	for _, g := range c.groups {
		dir := filepath.Join(c.dir, nodeName(i), fmt.Sprintf("shard%d", g))
		if err := replica.RecoverFolder(dir); err != nil {
			c.T.Fatal(err)
		}
		s, err := store.Open(dir, store.Options{})
		if err != nil {
			c.T.Fatal(err)
		}
		nd.stores[g] = s
		id := replicatest.ID(g, i)
		if c.SM[id] == nil {
			c.SM[id] = &replicatest.Recorder{SkipRepeats: true}
		}
		gc := replica.GroupConfig{Group: g, Replica: id, Peers: replicatest.Peers(g), Store: s, Machine: c.SM[id]}
		if c.keep > 0 {
			gc.Machine = nil
			gc.Folder = &replica.Folder{Dir: dir, Open: func(dir string) (*store.Store, error) { return store.Open(dir, store.Options{}) }}
		}
		if err := h.AddGroup(ctx, gc); err != nil {
			c.T.Fatal(err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle(raftnet.Path, tr.Handler())
	mux.Handle(raftnet.SnapshotPath, tr.SnapshotHandler())
	go func() { nd.served <- api.Serve(ctx, tls.NewListener(ln, c.serverTLS(i)), c.guard().Handler(mux), nil) }()
	tr.Start(ctx, h)
	h.Start(ctx)
	c.nodes[i] = nd
}

// stop stops node i as a node shuts down: its host, its transport, its
// server, then its stores.
func (c *netCluster) stop(i int) {
	nd := c.nodes[i]
	if nd == nil {
		return
	}
	c.nodes[i] = nil
	nd.host.Stop()
	nd.tr.Stop()
	nd.stop()
	if err := <-nd.served; err != nil {
		c.T.Errorf("node %d's server: %v", i, err)
	}
	for g := range nd.stores {
		// The host's: a snapshot may have replaced the store opened.
		if err := nd.host.Store(g).Close(); err != nil {
			c.T.Error(err)
		}
	}
}

// cut cuts node i off from both others, both ways; heal ends it.
func (c *netCluster) cut(i int, on bool) {
	for j := range c.nodes {
		if j == i {
			continue
		}
		for _, p := range []*tcpproxy.Proxy{c.proxy[i][j], c.proxy[j][i]} {
			if on {
				p.Cut()
			} else {
				p.Heal()
			}
		}
	}
}

// counter reads a counter of node i's transport (summed over labels
// matching label=value when label is set).
func (c *netCluster) counter(i int, name, label, value string) float64 {
	return counterOf(c.T, c.nodes[i].reg, name, label, value)
}

func counterOf(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					match = true
				}
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

var _ io.Writer = (*logBuffer)(nil)
