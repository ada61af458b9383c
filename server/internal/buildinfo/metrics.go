package buildinfo

import "github.com/prometheus/client_golang/prometheus"

// Collector is the progressdb_build_info gauge: always 1, with the build
// in its labels, so dashboards and alerts can tell which build answers and
// see a deploy as a change of labels.
func (i Info) Collector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "progressdb_build_info",
		Help: "Always 1; the labels name the running build (version, commit, Go version).",
		ConstLabels: prometheus.Labels{
			"version":   i.Version,
			"commit":    i.Commit,
			"goversion": i.Go,
		},
	})
	g.Set(1)
	return g
}
