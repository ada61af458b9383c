package raftnet

import "github.com/prometheus/client_golang/prometheus"

// Metrics count the transport's messages and streams.
type Metrics struct {
	sent       prometheus.Counter
	dropped    *prometheus.CounterVec
	reconnects prometheus.Counter
	rejected   prometheus.Counter
}

// Reasons a message is dropped, the label of the dropped counter.
const (
	dropQueueFull   = "queue_full"   // its peer's queue was full
	dropUnreachable = "unreachable"  // its peer's stream could not be opened or broke with it
	dropUnknown     = "unknown_peer" // the resolver names no node for its recipient
	dropStopped     = "stopped"      // the transport was not running
)

// NewMetrics registers the transport's metrics on reg (none when nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "progressdb_replica_messages_sent_total",
			Help: "Raft messages written to the streams to other nodes.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "progressdb_replica_messages_dropped_total",
			Help: "Raft messages dropped before reaching another node, by reason: queue_full (the peer's queue held 4096), unreachable (no stream to the peer), unknown_peer (no node known for the replica), stopped. Raft sends them again.",
		}, []string{"reason"}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "progressdb_replica_stream_reconnects_total",
			Help: "Streams to other nodes opened again after one broke or could not be opened.",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "progressdb_replica_frames_rejected_total",
			Help: "Streams from other nodes closed on a frame that was too large or undecodable.",
		}),
	}
	for _, r := range []string{dropQueueFull, dropUnreachable, dropUnknown, dropStopped} {
		m.dropped.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.sent, m.dropped, m.reconnects, m.rejected)
	}
	return m
}
