package retention

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/progressdb/progressdb/audit"
)

// counterValue returns the value of a collector holding one counter or
// gauge, or the sample count of one histogram.
func counterValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ms := collect(c)
	if len(ms) != 1 {
		t.Fatalf("collector has %d series, want 1", len(ms))
	}
	var d dto.Metric
	if err := ms[0].Write(&d); err != nil {
		t.Fatal(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	case d.Histogram != nil:
		return float64(d.Histogram.GetSampleCount())
	}
	t.Fatalf("unexpected metric %v", &d)
	return 0
}

func collect(c prometheus.Collector) []prometheus.Metric {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	var ms []prometheus.Metric
	for m := range ch {
		ms = append(ms, m)
	}
	return ms
}

func TestMetricsAfterRuns(t *testing.T) {
	e := newEnv(t)
	mids := e.thread("t1", 2, 2)
	e.deleteMessage("t1", mids[0])
	e.thread("t2", 1, 3)
	e.deleteThread("t2")
	e.at(31 * day)
	r := e.runner()

	res, _ := e.run(r, RunRequest{Trigger: TriggerSchedule})
	if res.Purged != 2 {
		t.Fatalf("result %+v", res)
	}
	m := e.metrics
	checks := []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"runs completed", m.Runs.WithLabelValues(resultCompleted), 1},
		{"runs failed", m.Runs.WithLabelValues(resultFailed), 0},
		{"threads purged", m.ItemsPurged.WithLabelValues("thread", "deleted"), 1},
		{"messages purged", m.ItemsPurged.WithLabelValues("message", "deleted"), 1},
		{"keys deleted", m.KeysDeleted, float64(res.KeysDeleted)},
		{"eligible", m.EligibleItems, 2},
		{"lease held", m.LeaseHeld, 0},
		{"last success", m.LastSuccess, float64(res.FinishedAt.UnixNano()) / 1e9},
		{"panics", m.Errors.WithLabelValues(stagePanic), 0},
	}
	for _, c := range checks {
		if got := counterValue(t, c.c); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	if n := counterValue(t, m.RunDuration); n != 1 {
		t.Fatalf("duration histogram has %v samples, want 1", n)
	}

	// A dry run counts as dry_run, and sets the eligible gauge to what it found.
	e.thread("t3", 1, 1)
	e.deleteThread("t3")
	e.at(62 * day)
	if res, _ := e.run(r, RunRequest{DryRun: true, Trigger: TriggerAdmin}); res.Status != audit.RunCompleted {
		t.Fatalf("dry run %+v", res)
	}
	if got := counterValue(t, m.Runs.WithLabelValues(resultDryRun)); got != 1 {
		t.Fatalf("runs{dry_run} = %v", got)
	}
	if got := counterValue(t, m.EligibleItems); got != 1 {
		t.Fatalf("eligible after dry run = %v", got)
	}
	// A dry run purges nothing: it is no success.
	lastReal := float64(res.FinishedAt.UnixNano()) / 1e9
	if got := counterValue(t, m.LastSuccess); got != lastReal {
		t.Fatalf("last success after a dry run = %v, want the real run's %v", got, lastReal)
	}
}

// TestLastSuccessRestoredAtStart: after a restart the gauge shows the last
// completed real run from the audit folder, not 0 and not a later dry or
// failed run.
func TestLastSuccessRestoredAtStart(t *testing.T) {
	e := newEnv(t)
	svc, err := NewService(ServiceOptions{Runner: e.runner()})
	if err != nil {
		t.Fatal(err)
	}
	if at, err := svc.RestoreLastSuccess(); err != nil || !at.IsZero() {
		t.Fatalf("restore with no audit folder = %v, %v", at, err)
	}
	if got := counterValue(t, e.metrics.LastSuccess); got != 0 {
		t.Fatalf("gauge = %v with no run", got)
	}

	e.thread("t1", 1, 1)
	e.deleteThread("t1")
	e.at(31 * day)
	done, _ := e.run(e.runner(), RunRequest{Trigger: TriggerSchedule})
	e.at(32 * day)
	if dry, _ := e.run(e.runner(), RunRequest{DryRun: true, Trigger: TriggerAdmin}); !dry.DryRun {
		t.Fatalf("dry run %+v", dry)
	}

	// A new process: fresh metrics, same audit folder.
	e.metrics = NewMetrics(prometheus.NewRegistry())
	svc, err = NewService(ServiceOptions{Runner: e.runner()})
	if err != nil {
		t.Fatal(err)
	}
	at, err := svc.RestoreLastSuccess()
	if err != nil || !at.Equal(done.FinishedAt.Time) {
		t.Fatalf("restored %v, %v; want the real run's finish %v", at, err, done.FinishedAt)
	}
	if got, want := counterValue(t, e.metrics.LastSuccess), float64(done.FinishedAt.UnixNano())/1e9; got != want {
		t.Fatalf("gauge = %v, want %v", got, want)
	}
}

func TestMetricsNamesMatchTheSpec(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	want := []string{
		"progressdb_retention_runs_total",
		"progressdb_retention_items_purged_total",
		"progressdb_retention_keys_deleted_total",
		"progressdb_retention_run_duration_seconds",
		"progressdb_retention_last_success_timestamp_seconds",
		"progressdb_retention_eligible_items",
		"progressdb_retention_lease_held",
		"progressdb_retention_paused",
		"progressdb_retention_errors_total",
		"progressdb_retention_ticks_skipped_total",
		"progressdb_retention_enabled",
		"progressdb_retention_dry_run",
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range fams {
		got[f.GetName()] = true
	}
	for _, name := range want {
		if !got[name] {
			t.Errorf("metric %s not registered", name)
		}
	}
	// Every label value is there from the start, at zero.
	m := NewMetrics(nil)
	if n := len(collect(m.Runs)); n != 6 {
		t.Errorf("runs_total has %d series, want 6", n)
	}
	if n := len(collect(m.ItemsPurged)); n != 4 {
		t.Errorf("items_purged_total has %d series, want 4 (threads: deleted; messages: every cause)", n)
	}
}
