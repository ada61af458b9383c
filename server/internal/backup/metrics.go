package backup

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the backup metrics of spec §10.
type Metrics struct {
	Total       *prometheus.CounterVec // result: success | failed | cancelled
	Duration    prometheus.Histogram
	Bytes       prometheus.Gauge // the last successful backup's size
	LastSuccess prometheus.Gauge
	// Interval is the longest gap between scheduled backups, 0 when none
	// are scheduled: the alert on missing backups waits two of them.
	Interval prometheus.Gauge
}

// NewMetrics makes the metrics and registers them with reg when not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "progressdb_backup_total", Help: "Backups made, by result (success, failed, cancelled: its client went away).",
		}, []string{"result"}),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "progressdb_backup_duration_seconds", Help: "How long a backup took.",
			Buckets: prometheus.ExponentialBuckets(0.1, 4, 9),
		}),
		Bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "progressdb_backup_bytes", Help: "Size of the last successful backup, in bytes.",
		}),
		LastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "progressdb_backup_last_success_timestamp_seconds", Help: "When the last successful backup finished (Unix time).",
		}),
		Interval: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "progressdb_backup_interval_seconds",
			Help: "Longest gap between scheduled backups (PROGRESSDB_BACKUP_CRON); 0 when backups are not scheduled.",
		}),
	}
	m.Total.WithLabelValues("success")
	m.Total.WithLabelValues("failed")
	m.Total.WithLabelValues("cancelled")
	if reg != nil {
		reg.MustRegister(m.Collectors()...)
	}
	return m
}

// Collectors lists the metrics NewMetrics registers, so that a caller can
// unregister them (a cluster node, for a shard moved away).
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Total, m.Duration, m.Bytes, m.LastSuccess, m.Interval}
}

func (m *Metrics) observe(err error, cancelled bool, took time.Duration, bytes int64, now time.Time) {
	switch {
	case cancelled:
		m.Total.WithLabelValues("cancelled").Inc()
		return
	case err != nil:
		m.Total.WithLabelValues("failed").Inc()
		return
	}
	m.Total.WithLabelValues("success").Inc()
	m.Duration.Observe(took.Seconds())
	m.Bytes.Set(float64(bytes))
	m.LastSuccess.Set(float64(now.UnixNano()) / 1e9)
}
