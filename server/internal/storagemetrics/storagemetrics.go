// Package storagemetrics serves the store's room and health as Prometheus
// gauges, read at each scrape: the database's size on disk, the bytes
// compactions still owe, the free space of the data volume, and whether
// the store can commit (what /healthz answers); and group commit's batch
// sizes, the writes each fsync of the log carried, as a histogram. Alerts on a disk filling up
// and a failing health check are built on them (deploy/prometheus).
package storagemetrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// checkTimeout bounds the health check one scrape makes.
const checkTimeout = 5 * time.Second

var (
	diskBytes = prometheus.NewDesc("progressdb_storage_disk_usage_bytes",
		"Size on disk of the database's files (tables, logs, manifest), obsolete files not yet removed included.", nil, nil)
	compactionDebt = prometheus.NewDesc("progressdb_storage_pending_compaction_bytes",
		"Pebble's estimate of the bytes compactions still have to rewrite; it grows when compactions fall behind.", nil, nil)
	volumeFree = prometheus.NewDesc("progressdb_storage_volume_free_bytes",
		"Bytes the server may still write on the file system holding the database (blocks reserved for root excluded).", nil, nil)
	volumeSize = prometheus.NewDesc("progressdb_storage_volume_size_bytes",
		"Size of the file system holding the database.", nil, nil)
	healthy = prometheus.NewDesc("progressdb_storage_healthy",
		"1 when the store can commit (GET /healthz answers 200), 0 when it cannot.", nil, nil)
	commitBatch = prometheus.NewDesc("progressdb_commit_batch_writes",
		"Acknowledged writes each fsync of the log made durable (group commit's batch size), since the store opened.", nil, nil)
)

// Collector reads the store at every scrape.
type Collector struct {
	st  *store.Store
	log *slog.Logger
}

// New returns the collector for st; errors reading the volume are logged
// to logger (nil: not logged) and leave its gauges out of that scrape.
func New(st *store.Store, logger *slog.Logger) *Collector {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Collector{st: st, log: logger}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{diskBytes, compactionDebt, volumeFree, volumeSize, healthy, commitBatch} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	up := 1.0
	if err := c.st.Check(ctx); err != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(healthy, prometheus.GaugeValue, up)
	b := c.st.CommitBatches()
	buckets := make(map[float64]uint64, len(store.CommitBatchBounds))
	for i, le := range store.CommitBatchBounds {
		buckets[le] = b.Buckets[i]
	}
	ch <- prometheus.MustNewConstHistogram(commitBatch, b.Count, float64(b.Sum), buckets)

	u, err := c.st.Usage()
	ch <- prometheus.MustNewConstMetric(diskBytes, prometheus.GaugeValue, float64(u.DiskBytes))
	ch <- prometheus.MustNewConstMetric(compactionDebt, prometheus.GaugeValue, float64(u.CompactionDebt))
	if err != nil {
		c.log.Warn("storage_metrics_volume_unreadable", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(volumeFree, prometheus.GaugeValue, float64(u.VolumeFree))
	ch <- prometheus.MustNewConstMetric(volumeSize, prometheus.GaugeValue, float64(u.VolumeSize))
}
