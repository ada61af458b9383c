package replica

import (
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
