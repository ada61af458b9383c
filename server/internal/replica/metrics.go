package replica

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The groups' series, labelled with the shard (the group) and read from
// the groups at each scrape, so a group the host stops running takes its
// series with it.
var (
	leaderDesc = prometheus.NewDesc("progressdb_replica_leader",
		"1 while this node's replica leads the shard's group and serves it (it has applied an entry of its term), else 0.",
		[]string{"shard"}, nil)
	appliedDesc = prometheus.NewDesc("progressdb_replica_applied_index",
		"The highest log index this node's replica of the shard has applied.",
		[]string{"shard"}, nil)
	leaderChangesDesc = prometheus.NewDesc("progressdb_replica_leader_changes_seen_total",
		"Leaders this node's replica of the shard saw elected since the process started (a new leader after another or after none).",
		[]string{"shard"}, nil)
	// Named for the cluster: summed over the nodes it counts the replicas
	// owing an erase (design §11).
	erasePendingDesc = prometheus.NewDesc("progressdb_cluster_erase_pending_replicas",
		"Replicas of the shard owing an erase as this node sees them: its own while it has applied a purge not yet erased from its files (its log included), and on the leader the replicas that have not yet received the last purge; summed over the nodes, the replicas owing an erase.",
		[]string{"shard"}, nil)
)

// metrics are a host's: the groups' series and the proposals' latency.
type metrics struct {
	h        *Host
	proposed prometheus.Histogram
}

func newMetrics(h *Host) *metrics {
	return &metrics{h: h, proposed: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "progressdb_replica_proposal_duration_seconds",
		Help: "Time from a write's proposal to its application on the replica that proposed it, which means a quorum has it on disk.",
		// 0.5 ms to about 16 s.
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	})}
}

// applied records a proposal applied where it was proposed.
func (m *metrics) applied(p *proposal) {
	if !p.start.IsZero() {
		m.proposed.Observe(time.Since(p.start).Seconds())
	}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- leaderDesc
	ch <- appliedDesc
	ch <- leaderChangesDesc
	ch <- erasePendingDesc
	m.proposed.Describe(ch)
}

// Collect implements prometheus.Collector. It reads each group's lease,
// applied index and count without its worker's lock: a scrape never
// waits for a group's fsync.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.h.mu.RLock()
	gs := make([]*group, 0, len(m.h.groups))
	for _, g := range m.h.groups {
		gs = append(gs, g)
	}
	m.h.mu.RUnlock()
	for _, g := range gs {
		shard := strconv.FormatUint(g.id, 10)
		leading := 0.0
		if g.lease.Load() != 0 {
			leading = 1
		}
		ch <- prometheus.MustNewConstMetric(leaderDesc, prometheus.GaugeValue, leading, shard)
		ch <- prometheus.MustNewConstMetric(appliedDesc, prometheus.GaugeValue, float64(g.raftLog().Applied()), shard)
		ch <- prometheus.MustNewConstMetric(leaderChangesDesc, prometheus.CounterValue, float64(g.leaderChanges.Load()), shard)
		pending := float64(g.behindPurge.Load())
		if g.owesErase() {
			pending++
		}
		ch <- prometheus.MustNewConstMetric(erasePendingDesc, prometheus.GaugeValue, pending, shard)
	}
	m.proposed.Collect(ch)
}
