package main

import (
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"
	dto "github.com/prometheus/client_model/go"
)

// walSnapshot is a copy of Pebble's histogram of WAL fsync latencies
// (cumulative counts per upper bound, in nanoseconds).
type walSnapshot struct {
	bounds []float64
	counts []uint64
}

func readWALSync(db *pebble.DB) walSnapshot {
	h := db.Metrics().LogWriter.FsyncLatency
	if h == nil {
		return walSnapshot{}
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil || m.Histogram == nil {
		return walSnapshot{}
	}
	var s walSnapshot
	for _, b := range m.Histogram.Bucket {
		s.bounds = append(s.bounds, b.GetUpperBound())
		s.counts = append(s.counts, b.GetCumulativeCount())
	}
	s.bounds = append(s.bounds, math.Inf(1))
	s.counts = append(s.counts, m.Histogram.GetSampleCount())
	return s
}

// walSyncPercentile is the p-th percentile of the WAL fsyncs between two
// snapshots (the upper bound of the bucket it falls in), and their number.
func walSyncPercentile(from, to walSnapshot, p float64) (time.Duration, uint64) {
	if len(from.counts) != len(to.counts) || len(to.counts) == 0 {
		return 0, 0
	}
	n := len(to.counts)
	total := to.counts[n-1] - from.counts[n-1]
	if total == 0 {
		return 0, 0
	}
	want := uint64(math.Ceil(p / 100 * float64(total)))
	for i := range to.counts {
		if to.counts[i]-from.counts[i] >= want {
			edge := to.bounds[i]
			if math.IsInf(edge, 1) && i > 0 {
				edge = to.bounds[i-1]
			}
			return time.Duration(edge), total
		}
	}
	return 0, total
}
