package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestReadFallsBackAndFindsPebble(t *testing.T) {
	info := Read()
	if info.Version == "" || info.Commit == "" {
		t.Fatalf("empty fields: %+v", info)
	}
	if info.Go != runtime.Version() {
		t.Errorf("Go = %q, want %q", info.Go, runtime.Version())
	}
	// Test binaries record their dependencies; this package's test does not
	// import Pebble, so it is reported as unknown here and found by the
	// command's own test.
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == PebbleModule && info.Pebble != d.Version {
				t.Errorf("Pebble = %q, want %q", info.Pebble, d.Version)
			}
		}
	}
}

func TestVCSCommit(t *testing.T) {
	got := vcsCommit([]debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}})
	if got != "0123456789ab-dirty" {
		t.Errorf("vcsCommit = %q", got)
	}
	if got := vcsCommit(nil); got != "" {
		t.Errorf("vcsCommit(nil) = %q", got)
	}
}

func TestCollector(t *testing.T) {
	info := Info{Version: "v1.2.3", Commit: "abc1234", Go: "go1.99"}
	reg := prometheus.NewRegistry()
	if err := reg.Register(info.Collector()); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) != 1 || fams[0].GetName() != "progressdb_build_info" || len(fams[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v", fams)
	}
	m := fams[0].GetMetric()[0]
	if m.GetGauge().GetValue() != 1 {
		t.Errorf("value %v, want 1", m.GetGauge().GetValue())
	}
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": "v1.2.3", "commit": "abc1234", "goversion": "go1.99"}
	if len(labels) != len(want) {
		t.Errorf("labels %v, want %v", labels, want)
	}
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, labels[k], v)
		}
	}
}
