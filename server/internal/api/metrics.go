package api

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics are the request counters and latencies (spec §8). Labels are
// bounded: route is the matched mux pattern, never the raw path, and
// unknown methods collapse into "other".
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec

	// The series of each label set seen, so that a request finds its two
	// series in one map read instead of hashing its labels into both vectors
	// and formatting its status (bounded as the labels are).
	mu     sync.RWMutex
	series map[seriesKey]requestSeries
}

type seriesKey struct {
	method, route string
	status        int
}

type requestSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// observe counts one request and its duration.
func (m *httpMetrics) observe(method, route string, status int, elapsed time.Duration) {
	k := seriesKey{method, route, status}
	m.mu.RLock()
	rs, ok := m.series[k]
	m.mu.RUnlock()
	if !ok {
		rs = requestSeries{
			requests: m.requests.WithLabelValues(method, route, strconv.Itoa(status)),
			duration: m.duration.WithLabelValues(method, route),
		}
		m.mu.Lock()
		m.series[k] = rs
		m.mu.Unlock()
	}
	rs.requests.Inc()
	rs.duration.Observe(elapsed.Seconds())
}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "progressdb_http_requests_total",
			Help: "HTTP requests served, by method, route pattern and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "progressdb_http_request_duration_seconds",
			Help:    "HTTP request latency, by method and route pattern.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route"}),
		series: make(map[seriesKey]requestSeries),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// methodLabel keeps the method label to a fixed set.
func methodLabel(method string) string {
	switch method {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS":
		return method
	default:
		return "other"
	}
}
