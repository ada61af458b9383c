package app

import (
	"log/slog"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/storagemetrics"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// shardMetrics registers the retention, storage and backup metrics of
// each shard a cluster node holds under a `shard` label: the shards' runs,
// stores and backups are separate, and one set of series would show
// whichever shard set it last. A shard moved away takes its series with it.
type shardMetrics struct {
	reg    prometheus.Registerer
	logger *slog.Logger
	mu     sync.Mutex
	shards map[int]shardSeries
}

// shardSeries are one shard's collectors, as registered.
type shardSeries struct {
	reg       prometheus.Registerer
	retention *retention.Metrics
	backup    *backup.Metrics
	storage   prometheus.Collector
}

func newShardMetrics(reg prometheus.Registerer, logger *slog.Logger) *shardMetrics {
	return &shardMetrics{reg: reg, logger: logger, shards: make(map[int]shardSeries)}
}

// add registers shard n's series (once; a shard added again keeps them)
// and returns its retention metrics.
func (s *shardMetrics) add(n int, st *store.Store) *retention.Metrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss, ok := s.shards[n]; ok {
		return ss.retention
	}
	reg := prometheus.WrapRegistererWith(prometheus.Labels{"shard": strconv.Itoa(n)}, s.reg)
	ss := shardSeries{reg: reg, retention: retention.NewMetrics(reg), backup: backup.NewMetrics(reg),
		storage: storagemetrics.New(st, s.logger.With("shard", n))}
	reg.MustRegister(ss.storage)
	s.shards[n] = ss
	return ss.retention
}

// backups returns shard n's backup metrics (nil before add).
func (s *shardMetrics) backups(n int) *backup.Metrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shards[n].backup
}

// remove unregisters shard n's series.
func (s *shardMetrics) remove(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.shards[n]
	if !ok {
		return
	}
	delete(s.shards, n)
	for _, c := range append(append(ss.retention.Collectors(), ss.backup.Collectors()...), ss.storage) {
		ss.reg.Unregister(c)
	}
}
