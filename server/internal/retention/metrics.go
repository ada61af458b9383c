package retention

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Run results as counted by progressdb_retention_runs_total.
const (
	resultCompleted    = "completed"
	resultFailed       = "failed"
	resultInterrupted  = "interrupted"
	resultSkippedLease = "skipped_lease"
	resultDryRun       = "dry_run"
	resultPaused       = "paused"
)

// Error stages as counted by progressdb_retention_errors_total.
const (
	stageLease    = "lease"
	stageAudit    = "audit"
	stageRecovery = "recovery"
	stageScan     = "scan"
	stageStamp    = "stamp"
	stagePurge    = "purge"
	stageSync     = "sync"
	stagePanic    = "panic"
	stageSchedule = "schedule"
	stageErase    = "erase"
	stageExport   = "export"
)

// Metrics are the retention subsystem's Prometheus metrics (spec §8).
type Metrics struct {
	Runs          *prometheus.CounterVec
	ItemsPurged   *prometheus.CounterVec
	KeysDeleted   prometheus.Counter
	ExportedItems prometheus.Counter
	RunDuration   prometheus.Histogram
	LastSuccess   prometheus.Gauge
	EligibleItems prometheus.Gauge
	LeaseHeld     prometheus.Gauge
	Paused        prometheus.Gauge
	Errors        *prometheus.CounterVec
	TicksSkipped  prometheus.Counter
	// Enabled and DryRun let alerts on missing successes ignore servers
	// that schedule no runs, or only dry runs.
	Enabled       prometheus.Gauge
	DryRun        prometheus.Gauge
	EraseDuration prometheus.Histogram
	// ReplayedItems counts purges repeated over restored databases
	// (replay.go).
	ReplayedItems prometheus.Counter
	// BlobsPurged counts attachment blobs deleted after their records
	// were purged (blobs.go).
	BlobsPurged prometheus.Counter
	// OrphansRemoved counts blobs (and uploads' leftovers) no record
	// named, removed after the grace period (orphans.go).
	OrphansRemoved prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg (skipped when
// reg is nil, which suits tools and tests that do not export metrics).
// Every known label value starts at zero so dashboards see the series at once.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "progressdb_retention_runs_total",
			Help: "Retention runs by result: completed, failed, interrupted, skipped_lease, dry_run, paused.",
		}, []string{"result"}),
		ItemsPurged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "progressdb_retention_items_purged_total",
			Help: "Threads and messages purged, by kind and cause (deleted, max_age, max_messages).",
		}, []string{"kind", "cause"}),
		KeysDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "progressdb_retention_keys_deleted_total",
			Help: "Keys deleted by retention purges.",
		}),
		ExportedItems: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "progressdb_retention_exported_items_total",
			Help: "Export records made durable before their items were deleted (PROGRESSDB_RETENTION_EXPORT_PATH).",
		}),
		RunDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "progressdb_retention_run_duration_seconds",
			Help:    "Duration of retention runs that got the lease.",
			Buckets: []float64{0.01, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600},
		}),
		LastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "progressdb_retention_last_success_timestamp_seconds",
			Help: "Unix time at which the last completed retention run (not a dry run) finished; restored from the audit folder at start.",
		}),
		EligibleItems: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "progressdb_retention_eligible_items",
			Help: "Items found eligible for purge by the last run (dry runs included).",
		}),
		LeaseHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "progressdb_retention_lease_held",
			Help: "1 while this process holds the retention lease.",
		}),
		Paused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "progressdb_retention_paused",
			Help: "1 while retention is paused (PUT /admin/retention/pause).",
		}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "progressdb_retention_errors_total",
			Help: "Retention errors by stage.",
		}, []string{"stage"}),
		TicksSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "progressdb_retention_ticks_skipped_total",
			Help: "Scheduled ticks skipped because a run was still going.",
		}),
		Enabled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "progressdb_retention_enabled",
			Help: "1 when PROGRESSDB_RETENTION_ENABLED is true: the scheduler runs retention.",
		}),
		DryRun: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "progressdb_retention_dry_run",
			Help: "1 when PROGRESSDB_RETENTION_DRY_RUN is true: every run is a dry run and purges nothing.",
		}),
		EraseDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "progressdb_retention_erase_duration_seconds",
			Help:    "Duration of the erase step at the end of retention runs (flush, compaction of purged ranges, WAL rotation).",
			Buckets: []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 900},
		}),
		ReplayedItems: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "progressdb_restore_replayed_items_total",
			Help: "Purges the audit trail records, repeated over a restored database (restore, or a copy caught at start).",
		}),
		BlobsPurged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "progressdb_retention_blobs_purged_total",
			Help: "Attachment blobs deleted from the blob store after their records were purged.",
		}),
		OrphansRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "progressdb_retention_orphan_blobs_removed_total",
			Help: "Attachment blobs and uploads' leftovers that no record named, removed once older than the orphan grace period.",
		}),
	}
	for _, r := range []string{resultCompleted, resultFailed, resultInterrupted, resultSkippedLease, resultDryRun, resultPaused} {
		m.Runs.WithLabelValues(r)
	}
	// Threads are purged only once deleted; the policies purge messages.
	m.ItemsPurged.WithLabelValues(string(store.KindThread), audit.CauseDeleted)
	for _, c := range causes {
		m.ItemsPurged.WithLabelValues(string(store.KindMessage), c)
	}
	for _, s := range []string{stageLease, stageAudit, stageRecovery, stageScan, stageStamp, stagePurge, stageSync, stagePanic, stageSchedule, stageErase, stageExport} {
		m.Errors.WithLabelValues(s)
	}
	if reg != nil {
		reg.MustRegister(m.Collectors()...)
	}
	return m
}

// Collectors lists the metrics NewMetrics registers, so that a caller can
// unregister them (a cluster node, for a shard moved away).
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Runs, m.ItemsPurged, m.KeysDeleted, m.ExportedItems, m.RunDuration, m.LastSuccess,
		m.EligibleItems, m.LeaseHeld, m.Paused, m.Errors, m.TicksSkipped, m.Enabled, m.DryRun, m.EraseDuration, m.ReplayedItems,
		m.BlobsPurged, m.OrphansRemoved}
}

func (m *Metrics) countError(stage string) { m.Errors.WithLabelValues(stage).Inc() }

// restoreLastSuccess sets the last-success gauge from the newest completed,
// non-dry audit file, so that a restart does not reset it to 0 and fire the
// "no successful run" alert. It returns when that run finished (zero when
// there was none); the gauge never moves back.
func (r *Runner) restoreLastSuccess() (time.Time, error) {
	// The database's own runs: a copy's sharing the trail are not (spec §10.1).
	dbID, err := r.st.DatabaseID(context.Background(), false)
	if err != nil {
		return time.Time{}, err
	}
	sum, err := audit.LastCompletedOf(r.cfg.AuditPath, dbID)
	if err != nil || sum == nil {
		return time.Time{}, err
	}
	at := sum.Footer.FinishedAt
	secs := float64(at.UnixNano()) / 1e9
	var cur dto.Metric
	if err := r.metrics.LastSuccess.Write(&cur); err == nil && cur.GetGauge().GetValue() >= secs {
		return at, nil // a run of this process finished later
	}
	r.metrics.LastSuccess.Set(secs)
	return at, nil
}
