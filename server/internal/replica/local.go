package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Local is a Transport between hosts of one process, for tests and tools:
// a message is copied as a network would (the recipient shares no memory
// with the sender) and delivered at once, unless its recipient is cut
// off. Replica IDs are unique across every group, so a message's To
// names one host.
type Local struct {
	mu    sync.RWMutex
	hosts map[uint64]*Host // by replica ID; guarded by mu
	cut   map[uint64]bool  // replicas whose messages are dropped both ways; guarded by mu
	deaf  map[uint64]bool  // replicas whose incoming messages are dropped; guarded by mu
	// cutAfter breaks every snapshot stream after so many bytes (0:
	// never); broken counts the streams it broke. Guarded by mu.
	cutAfter int64
	broken   int
}

// NewLocal returns a network with no hosts.
func NewLocal() *Local {
	return &Local{hosts: make(map[uint64]*Host), cut: make(map[uint64]bool), deaf: make(map[uint64]bool)}
}

// Attach routes messages for replica to h (replacing an earlier host: a
// restarted node).
func (l *Local) Attach(replica uint64, h *Host) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hosts[replica] = h
}

// Cut drops every message to or from replica until Heal.
func (l *Local) Cut(replica uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut[replica] = true
}

// Deafen drops every message to replica until Heal, while its own go
// out: a leader whose followers get its appends but whose answers are
// lost.
func (l *Local) Deafen(replica uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deaf[replica] = true
}

// Heal ends a Cut or a Deafen.
func (l *Local) Heal(replica uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.cut, replica)
	delete(l.deaf, replica)
}

// Send implements Transport.
func (l *Local) Send(group uint64, msgs []*raftpb.Message) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, m := range msgs {
		h := l.hosts[m.GetTo()]
		if h == nil || l.cut[m.GetTo()] || l.cut[m.GetFrom()] || l.deaf[m.GetTo()] {
			continue
		}
		h.Deliver(group, proto.Clone(m).(*raftpb.Message))
	}
}

// errUnreachable: a snapshot's recipient is not attached or cut off.
var errUnreachable = errors.New("replica unreachable")

// errStreamCut: BreakSnapshots ended the stream.
var errStreamCut = errors.New("snapshot stream cut")

// BreakSnapshots makes every snapshot stream stop after n bytes, as a
// sender that died half way (0: streams go through again).
func (l *Local) BreakSnapshots(n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cutAfter = n
}

// SnapshotsBroken is the number of snapshot streams BreakSnapshots broke.
func (l *Local) SnapshotsBroken() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.broken
}

// SendSnapshot implements SnapshotSender: the stream goes through a pipe
// to the recipient's host.
func (l *Local) SendSnapshot(ctx context.Context, group uint64, m *raftpb.Message, write func(io.Writer) error) error {
	l.mu.RLock()
	h := l.hosts[m.GetTo()]
	off := h == nil || l.cut[m.GetTo()] || l.cut[m.GetFrom()] || l.deaf[m.GetTo()]
	cutAfter := l.cutAfter
	l.mu.RUnlock()
	if off {
		return fmt.Errorf("replica %d: %w", m.GetTo(), errUnreachable)
	}
	pr, pw := io.Pipe()
	wrote := make(chan error, 1)
	go func() {
		var w io.Writer = pw
		if cutAfter > 0 {
			w = &cutWriter{w: pw, left: cutAfter}
		}
		err := write(w)
		pw.CloseWithError(err)
		wrote <- err
	}()
	err := h.ReceiveSnapshot(ctx, group, proto.Clone(m).(*raftpb.Message), pr)
	_ = pr.CloseWithError(errors.New("the receiver stopped reading"))
	werr := <-wrote
	if errors.Is(werr, errStreamCut) {
		l.mu.Lock()
		l.broken++
		l.mu.Unlock()
	}
	return errors.Join(err, werr)
}

// cutWriter fails once left bytes went through.
type cutWriter struct {
	w    io.Writer
	left int64
}

func (c *cutWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		n, _ := c.w.Write(p[:c.left])
		c.left = 0
		return n, errStreamCut
	}
	n, err := c.w.Write(p)
	c.left -= int64(n)
	return n, err
}
