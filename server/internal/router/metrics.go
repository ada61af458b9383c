package router

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the cluster's metrics (spec §11).
type Metrics struct {
	forwarded  *prometheus.CounterVec
	fenced     prometheus.Counter
	etcdErrors prometheus.Counter
}

// NewMetrics registers the cluster metrics on reg (none when nil); owned
// reports how many shards this node owns now.
func NewMetrics(reg prometheus.Registerer, owned func() int) *Metrics {
	m := &Metrics{
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "progressdb_cluster_forwarded_total",
			Help: "Requests forwarded to the node owning their shard, by result: ok, retried (a 421 for a stale epoch, sent again with the current map), misdirected (421 again after the retry), unavailable (owner down or unreachable).",
		}, []string{"result"}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "progressdb_cluster_fencing_rejections_total",
			Help: "Writes refused by a shard's store because a newer owner's epoch had written (store.ErrFenced).",
		}),
		etcdErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "progressdb_cluster_etcd_errors_total",
			Help: "Failed reads of the cluster state from etcd.",
		}),
	}
	for _, r := range []string{"ok", "retried", "misdirected", "unavailable"} {
		m.forwarded.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.forwarded, m.fenced, m.etcdErrors)
		if owned != nil {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "progressdb_cluster_shards_owned",
				Help: "Shards this node owns now.",
			}, func() float64 { return float64(owned()) }))
		}
	}
	return m
}

// EtcdError counts a failed etcd call made outside the router: the
// ownerships' renewals and acquisitions, the node's registration, the
// retention pause switch.
func (m *Metrics) EtcdError(error) { m.etcdErrors.Inc() }

// Fenced counts a write refused by a shard's fence outside a request: a
// retention run's batch, marker or stamp.
func (m *Metrics) Fenced(error) { m.fenced.Inc() }
