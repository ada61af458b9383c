package raftnet_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/progressdb/progressdb/internal/testcerts"
	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/replica/raftnet"
	"github.com/progressdb/progressdb/server/internal/router"
)

// hostLog is a raftnet.Host that keeps what it was handed, for the tests
// that need no raft group behind the transport.
type hostLog struct {
	mu          sync.Mutex
	delivered   []*raftpb.Message
	unreachable map[[2]uint64]int // by (group, replica)
	snapFailed  int
}

func newHostLog() *hostLog { return &hostLog{unreachable: make(map[[2]uint64]int)} }

func (h *hostLog) Deliver(_ uint64, m *raftpb.Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.delivered = append(h.delivered, m)
}

func (h *hostLog) ReportUnreachable(group, replica uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unreachable[[2]uint64{group, replica}]++
}

func (h *hostLog) ReportSnapshot(_, _ uint64, status raft.SnapshotStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if status == raft.SnapshotFailure {
		h.snapFailed++
	}
}

func heartbeats(n int, from, to uint64) []*raftpb.Message {
	msgs := make([]*raftpb.Message, n)
	for k := range msgs {
		msgs[k] = &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), From: new(from), To: new(to),
			Commit: new(uint64(k))}
	}
	return msgs
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A peer that takes the connection and never answers holds its stream
// open: Send still returns, the queue keeps 4096 messages and drops the
// rest, each drop told to its group (a dropped snapshot as a failed
// one). When the connection then fails, the queued ones are dropped and
// told too.
func TestFullQueueDropsInsteadOfBlocking(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // never read: the TLS handshake hangs
			mu.Unlock()
		}
	}()
	ca := testcerts.NewCA(t, "cluster CA")
	reg := prometheus.NewRegistry()
	tr, err := raftnet.New(raftnet.Options{Node: "node0", Secret: secret, Metrics: raftnet.NewMetrics(reg),
		TLS: testcerts.ClientConfig(ca.Pool()),
		Resolve: func(uint64) (raftnet.Peer, bool) {
			return raftnet.Peer{Node: "stuck", URL: "https://" + ln.Addr().String()}, true
		}})
	if err != nil {
		t.Fatal(err)
	}
	h := newHostLog()
	tr.Start(context.Background(), h)
	defer tr.Stop()

	const g, n = 3, 5000
	msgs := heartbeats(n-1, 1, 2)
	msgs = append(msgs, &raftpb.Message{Type: raftpb.MessageType_MsgSnap.Enum(), From: new(uint64(1)), To: new(uint64(2)),
		Snapshot: &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(9)), Term: new(uint64(2))}}})
	tr.Send(g, msgs)
	if got := counterOf(t, reg, metricDropped, "reason", "queue_full"); got != n-raftnet.DefaultQueueSize {
		t.Fatalf("dropped %v messages for a full queue, want %d", got, n-raftnet.DefaultQueueSize)
	}
	h.mu.Lock()
	told, snaps := h.unreachable[[2]uint64{g, 2}], h.snapFailed
	h.mu.Unlock()
	if told == 0 || snaps != 1 {
		t.Fatalf("group told of %d unreachable sends and %d failed snapshots, want some and 1", told, snaps)
	}
	if got := counterOf(t, reg, metricSent, "", ""); got != 0 {
		t.Fatalf("%v messages counted as sent to a peer that never answered", got)
	}

	mu.Lock()
	for _, c := range held {
		_ = c.Close()
	}
	_ = ln.Close()
	mu.Unlock()
	waitUntil(t, "the queued messages dropped once the stream failed", func() bool {
		return counterOf(t, reg, metricDropped, "reason", "unreachable") == raftnet.DefaultQueueSize
	})
}

// Over plain HTTP (a cluster without mutual TLS) a stream is HTTP/1.1,
// full duplex: every message of several frames arrives, in order, on one
// stream.
func TestPlainHTTPStreamDelivers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resolve := func(uint64) (raftnet.Peer, bool) {
		return raftnet.Peer{Node: "b", URL: "http://" + ln.Addr().String()}, true
	}
	recv, err := raftnet.New(raftnet.Options{Node: "b", Secret: secret, Resolve: resolve})
	if err != nil {
		t.Fatal(err)
	}
	regA := prometheus.NewRegistry()
	send, err := raftnet.New(raftnet.Options{Node: "a", Secret: secret, Resolve: resolve, Metrics: raftnet.NewMetrics(regA)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	mux := http.NewServeMux()
	mux.Handle(raftnet.Path, recv.Handler())
	go func() { served <- api.Serve(ctx, ln, mux, nil) }()
	h := newHostLog()
	recv.Start(ctx, h)
	send.Start(ctx, newHostLog())
	defer func() {
		send.Stop()
		recv.Stop()
		stop()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	const n = 300
	msgs := heartbeats(n, 1, 2)
	for k := 0; k < n; k += 100 {
		send.Send(4, msgs[k:k+100])
		waitUntil(t, fmt.Sprintf("%d messages delivered", k+100), func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return len(h.delivered) >= k+100
		})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, m := range h.delivered {
		if m.GetCommit() != uint64(k) || m.GetType() != raftpb.MessageType_MsgHeartbeat || m.GetTo() != 2 {
			t.Fatalf("message %d arrived as %v", k, m)
		}
	}
	if r := counterOf(t, regA, metricReconnects, "", ""); r != 0 {
		t.Fatalf("the stream was opened again %v times", r)
	}
}

// Only the cluster's nodes open streams: without a node certificate, or
// with one of another CA, the guard refuses; with one but without the
// secret, the handler does; a frame over the size cap ends the stream
// with its reason.
func TestStreamsAreForNodesOnly(t *testing.T) {
	c := newNetCluster(t, 9)
	url := "https://" + c.addrs[0] + raftnet.Path
	other := testcerts.NewCA(t, "another CA").Issue(t, nodeName(1), testcerts.Options{})
	post := func(certs []tls.Certificate, sec, method string, body []byte) (int, string) {
		t.Helper()
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: testcerts.ClientConfig(c.ca.Pool(), certs...),
			ForceAttemptHTTP2: true}}
		defer cl.CloseIdleConnections()
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(router.HeaderNode, nodeName(1))
		req.Header.Set(router.HeaderSecret, sec)
		req.Header.Set("Content-Type", "application/x-progressdb-raft")
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(got)
	}
	code := func(body string) string {
		var e struct{ Code string }
		_ = json.Unmarshal([]byte(body), &e)
		return e.Code
	}
	mine := []tls.Certificate{c.leaves[1].TLS(t)}
	for _, tc := range []struct {
		name   string
		certs  []tls.Certificate
		secret string
		method string
		status int
	}{
		{"no certificate", nil, secret, http.MethodPost, http.StatusForbidden},
		{"another CA's certificate", []tls.Certificate{other.TLS(t)}, secret, http.MethodPost, http.StatusForbidden},
		{"no secret", mine, "", http.MethodPost, http.StatusForbidden},
		{"a wrong secret", mine, "not-" + secret, http.MethodPost, http.StatusForbidden},
		{"GET", mine, secret, http.MethodGet, http.StatusMethodNotAllowed},
	} {
		status, body := post(tc.certs, tc.secret, tc.method, nil)
		if status != tc.status || (status == http.StatusForbidden && code(body) != string(api.CodeNotANode)) {
			t.Errorf("%s: %d %s, want %d", tc.name, status, body, tc.status)
		}
	}
	huge := binary.BigEndian.AppendUint32(nil, raftnet.DefaultMaxFrame+1)
	status, body := post(mine, secret, http.MethodPost, huge)
	if status != http.StatusOK || !strings.Contains(body, "frame rejected") || !strings.Contains(body, "more than the") {
		t.Fatalf("an oversized frame: %d %q", status, body)
	}
	if got := c.counter(0, metricRejected, "", ""); got != 1 {
		t.Fatalf("%v frames counted as rejected, want 1", got)
	}
	c.Propose(1, 9, "still served")
	c.Converged(9, 1)
}
