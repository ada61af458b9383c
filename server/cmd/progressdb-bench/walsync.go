package main

import (
	"fmt"
	"math"
	"os"
	"slices"
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

// fsyncLatency is how long this disk takes to make a small append durable:
// what bounds a lone writer's synced commits.
type fsyncLatency struct {
	n             int
	p50, p90, p99 time.Duration
}

// fastFsync is the median below which a disk counts as fast: a 2-core
// machine with such a disk is bound by CPU, not by syncs, at 16 writers.
const fastFsync = 200 * time.Microsecond

func (f fsyncLatency) describe() string {
	kind := "slow"
	if f.p50 < fastFsync {
		kind = "fast"
	}
	return fmt.Sprintf("This disk's fsync of a 512-byte append (%d syncs in the database's folder): p50 %s, "+
		"p90 %s, p99 %s: a %s-fsync machine (fast: a median under %s).",
		f.n, fmtDur(f.p50), fmtDur(f.p90), fmtDur(f.p99), kind, fmtDur(fastFsync))
}

// fsyncProbe appends 512 bytes and syncs, n times, in a file in dir.
func fsyncProbe(dir string, n int) (fsyncLatency, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fsyncLatency{}, err
	}
	f, err := os.CreateTemp(dir, "fsync")
	if err != nil {
		return fsyncLatency{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 512)
	lat := make([]time.Duration, 0, n)
	for range n {
		if _, err := f.Write(buf); err != nil {
			return fsyncLatency{}, err
		}
		t0 := time.Now()
		if err := f.Sync(); err != nil {
			return fsyncLatency{}, err
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return fsyncLatency{n: n, p50: percentile(lat, 50), p90: percentile(lat, 90), p99: percentile(lat, 99)}, nil
}
