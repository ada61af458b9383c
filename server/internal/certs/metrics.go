package certs

import (
	"github.com/prometheus/client_golang/prometheus"
)

// expiry is the progressdb_tls_cert_expiry_timestamp_seconds collector:
// read at each scrape, so a reload shows at once.
type expiry struct {
	desc  *prometheus.Desc
	pairs map[string]*Pair
}

// NewExpiryCollector reports when each pair's certificate in force
// expires, labelled cert=<name> (server, cluster).
func NewExpiryCollector(pairs map[string]*Pair) prometheus.Collector {
	return &expiry{
		desc: prometheus.NewDesc("progressdb_tls_cert_expiry_timestamp_seconds",
			"When the certificate in force expires (Unix seconds): cert=server is the one the listener serves, cert=cluster the one presented to other nodes. Reloads update it.",
			[]string{"cert"}, nil),
		pairs: pairs,
	}
}

func (e *expiry) Describe(ch chan<- *prometheus.Desc) { ch <- e.desc }

func (e *expiry) Collect(ch chan<- prometheus.Metric) {
	for name, p := range e.pairs {
		ch <- prometheus.MustNewConstMetric(e.desc, prometheus.GaugeValue, float64(p.Leaf().NotAfter.Unix()), name)
	}
}
