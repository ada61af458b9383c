package main

import (
	"math"
	"runtime/metrics"
	"slices"
	"time"
)

// schedSnapshot is a copy of the runtime's histogram of the time goroutines
// spend runnable before they run (/sched/latencies:seconds).
type schedSnapshot struct {
	counts  []uint64
	buckets []float64
}

const schedMetric = "/sched/latencies:seconds"

func readSched() schedSnapshot {
	s := []metrics.Sample{{Name: schedMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return schedSnapshot{}
	}
	h := s[0].Value.Float64Histogram()
	return schedSnapshot{counts: slices.Clone(h.Counts), buckets: slices.Clone(h.Buckets)}
}

// schedPercentile is the p-th percentile of the scheduling latencies
// recorded between two snapshots (the upper edge of the bucket it falls in).
func schedPercentile(from, to schedSnapshot, p float64) time.Duration {
	if len(from.counts) != len(to.counts) || len(to.counts) == 0 {
		return 0
	}
	var total uint64
	delta := make([]uint64, len(to.counts))
	for i := range to.counts {
		delta[i] = to.counts[i] - from.counts[i]
		total += delta[i]
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(p / 100 * float64(total)))
	var seen uint64
	for i, c := range delta {
		seen += c
		if seen >= want {
			edge := to.buckets[i+1]
			if math.IsInf(edge, 1) {
				edge = to.buckets[i]
			}
			return time.Duration(edge * float64(time.Second))
		}
	}
	return 0
}
