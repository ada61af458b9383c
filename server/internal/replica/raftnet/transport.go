// Package raftnet carries the Raft messages of a node's replicas to the
// other nodes (docs/replication-design.md §6): one long-lived stream per
// peer node, a POST to Path over the node-to-node listener and its mutual
// TLS, whose body is a sequence of frames each holding a batch of
// (group, message) records, so that one write carries many shards'
// messages. A bounded queue per peer drops, and tells raft, rather than
// block a group's worker.
package raftnet

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/router"
	"github.com/progressdb/progressdb/server/internal/startstop"
)

// Path is the node-to-node route of the streams.
const Path = router.InternalPrefix + "raft"

// Defaults (design §6).
const (
	DefaultQueueSize = 4096
	// DefaultMaxFrame bounds a frame the receiver reads; a message alone
	// larger than it is never sent. Raft caps an append at 1 MiB of
	// entries, but one entry may be larger.
	DefaultMaxFrame = 128 << 20
	// batchBytes is where a sender stops adding messages to a frame.
	batchBytes = 1 << 20
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
	// dialTimeout bounds opening a stream: connecting, TLS, the answer.
	dialTimeout = 5 * time.Second
	// pingAfter and pingTimeout find a connection that went silent (a
	// partition that closes nothing): within about an election timeout.
	pingAfter   = time.Second
	pingTimeout = 2 * time.Second
	// writeTimeout ends a stream whose peer took no frame for so long.
	writeTimeout = 10 * time.Second
	// streamIdle closes a stream that carried nothing for so long; its
	// sender opens one again when it has messages.
	streamIdle = time.Minute
)

// Host is what the transport hands messages and reports to: a
// *replica.Host.
type Host interface {
	Deliver(group uint64, m *raftpb.Message)
	ReportUnreachable(group, replica uint64)
	ReportSnapshot(group, replica uint64, status raft.SnapshotStatus)
}

var (
	_ Host              = (*replica.Host)(nil)
	_ replica.Transport = (*Transport)(nil)
)

// Peer is a node that runs replicas: its ID and the base URL of its
// node-to-node listener (its advertise URL).
type Peer struct {
	Node string
	URL  string
}

// Options configure a Transport.
type Options struct {
	// Node is this node's ID, which its streams name (the node header).
	Node string
	// Secret is the cluster secret: streams carry it, and a stream
	// without it is refused.
	Secret string
	// Resolve names the node running a replica (a Raft ID); false when
	// none is known, and the message is dropped.
	Resolve func(replica uint64) (Peer, bool)
	// TLS is what this node presents and trusts when it opens a stream
	// (its cluster certificate; nil: plain HTTP/1.1).
	TLS       *tls.Config
	Logger    *slog.Logger
	Metrics   *Metrics
	QueueSize int // DefaultQueueSize when 0
	MaxFrame  int // DefaultMaxFrame when 0
}

// Transport is a node's streams to the other nodes and its handler of
// theirs. Start runs it; Send and the handler do nothing before.
type Transport struct {
	o      Options
	client *http.Client
	life   startstop.Base

	mu     sync.Mutex
	host   Host               // guarded by mu; nil until Start
	ctx    context.Context    // the peers' context; guarded by mu
	cancel context.CancelFunc // guarded by mu
	peers  map[string]*peer   // by node ID; guarded by mu
	wg     sync.WaitGroup     // the peers' goroutines
}

// New returns a transport; Start runs it.
func New(o Options) (*Transport, error) {
	switch {
	case o.Node == "" || o.Secret == "":
		return nil, errors.New("raftnet: a node ID and the cluster secret are required")
	case o.Resolve == nil:
		return nil, errors.New("raftnet: a resolver of replicas is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.MaxFrame <= 0 {
		o.MaxFrame = DefaultMaxFrame
	}
	tr := &http.Transport{
		Proxy:               nil, // node to node, never through a proxy
		DialContext:         (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     o.TLS,
		TLSHandshakeTimeout: dialTimeout,
		ForceAttemptHTTP2:   o.TLS != nil,
		HTTP2:               &http.HTTP2Config{SendPingTimeout: pingAfter, PingTimeout: pingTimeout},
	}
	return &Transport{o: o, client: &http.Client{Transport: tr}, peers: make(map[string]*peer)}, nil
}

// Start runs the transport for h until ctx ends or Stop: streams open to
// peers as messages for them come, and the handler delivers to h.
func (t *Transport) Start(ctx context.Context, h Host) {
	t.life.Start(ctx, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.host = h
		t.ctx, t.cancel = context.WithCancel(context.WithoutCancel(ctx))
	}, t.run)
}

// Stop closes every stream, sent and received, and waits for the
// senders.
func (t *Transport) Stop() { t.life.Stop() }

func (t *Transport) run(ctx context.Context) {
	<-ctx.Done()
	t.mu.Lock()
	t.cancel()
	t.mu.Unlock()
	t.wg.Wait()
	t.client.CloseIdleConnections()
}

// running returns the host and the peers' context; a nil host before
// Start, and after Stop began.
func (t *Transport) running() (Host, context.Context) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx == nil || t.ctx.Err() != nil {
		return nil, nil
	}
	return t.host, t.ctx
}

// Send implements replica.Transport: each message is queued for the node
// of its recipient, or dropped (and its group told) when the queue is
// full or no node is known. It never blocks on the network.
func (t *Transport) Send(group uint64, msgs []*raftpb.Message) {
	h, ctx := t.running()
	for _, m := range msgs {
		if h == nil {
			t.o.Metrics.dropped.WithLabelValues(dropStopped).Inc()
			continue
		}
		to, ok := t.o.Resolve(m.GetTo())
		if !ok {
			t.o.Metrics.dropped.WithLabelValues(dropUnknown).Inc()
			report(h, []queued{{group: group, to: m.GetTo(), snap: m.GetType() == raftpb.MessageType_MsgSnap}})
			continue
		}
		rec, err := appendRecord(nil, group, m)
		if err != nil || len(rec) > t.o.MaxFrame {
			t.o.Logger.Error("raft_message_unsendable", "group", group, "to", m.GetTo(), "type", m.GetType().String(),
				"bytes", len(rec), "max_frame", t.o.MaxFrame, "err", err)
			t.o.Metrics.dropped.WithLabelValues(dropUnreachable).Inc()
			report(h, []queued{{group: group, to: m.GetTo(), snap: m.GetType() == raftpb.MessageType_MsgSnap}})
			continue
		}
		pr := t.peer(ctx, to)
		if pr == nil {
			t.o.Metrics.dropped.WithLabelValues(dropStopped).Inc()
			continue
		}
		pr.enqueue(h, queued{group: group, to: m.GetTo(), snap: m.GetType() == raftpb.MessageType_MsgSnap, rec: rec})
	}
}

// peer returns the sender to node p, started at its first message; nil
// once the transport stops (checked under mu, which run holds to cancel,
// so no sender starts after run waits for them).
func (t *Transport) peer(ctx context.Context, p Peer) *peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ctx.Err() != nil {
		return nil
	}
	pr := t.peers[p.Node]
	if pr == nil {
		pr = &peer{t: t, node: p.Node, url: p.URL, wake: make(chan struct{}, 1)}
		t.peers[p.Node] = pr
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			pr.run(ctx)
		}()
	}
	pr.setURL(p.URL)
	return pr
}

// report tells each message's group that it did not reach its replica;
// a snapshot's failure is reported as such, so that it is sent again.
func report(h Host, lost []queued) {
	type key struct{ group, to uint64 }
	seen := make(map[key]bool, len(lost))
	for _, q := range lost {
		if q.snap {
			h.ReportSnapshot(q.group, q.to, raft.SnapshotFailure)
		}
		if k := (key{q.group, q.to}); !seen[k] {
			seen[k] = true
			h.ReportUnreachable(q.group, q.to)
		}
	}
}
