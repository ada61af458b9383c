package storagemetrics_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/internal/storagemetrics"
	"github.com/progressdb/progressdb/server/pkg/store"
)

func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
	}
	return out
}

// The gauges read a real store at each scrape; after a fatal storage
// error the health gauge is 0, as /healthz answers 503.
func TestStorageGauges(t *testing.T) {
	st, err := store.Open(t.TempDir(), store.Options{Fatal: func(string) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(storagemetrics.New(st, nil))

	m := gather(t, reg)
	for _, name := range []string{
		"progressdb_storage_disk_usage_bytes", "progressdb_storage_pending_compaction_bytes",
		"progressdb_storage_volume_free_bytes", "progressdb_storage_volume_size_bytes", "progressdb_storage_healthy",
	} {
		if _, ok := m[name]; !ok {
			t.Errorf("no %s in %v", name, m)
		}
	}
	if m["progressdb_storage_disk_usage_bytes"] <= 0 || m["progressdb_storage_volume_size_bytes"] <= 0 ||
		m["progressdb_storage_volume_free_bytes"] > m["progressdb_storage_volume_size_bytes"] || m["progressdb_storage_healthy"] != 1 {
		t.Fatalf("gauges %v", m)
	}
	u, err := st.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if m["progressdb_storage_volume_size_bytes"] != float64(u.VolumeSize) {
		t.Fatalf("volume size %v, store says %d", m["progressdb_storage_volume_size_bytes"], u.VolumeSize)
	}

	func() {
		defer func() { _ = recover() }() // Options.Fatal returned: the store panics
		st.Fatal("disk gone")
	}()
	if m := gather(t, reg); m["progressdb_storage_healthy"] != 0 {
		t.Fatalf("healthy after a fatal storage error: %v", m["progressdb_storage_healthy"])
	}
}

// Group commit's batch sizes are served as a histogram: a lone writer's
// every fsync carries its one write.
func TestCommitBatchHistogram(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateThread(ctx, store.Thread{ID: "t1", Title: "t", Author: "ana"}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := st.AppendMessage(ctx, "t1", store.Message{Author: "ana", Body: json.RawMessage(`{"text":"hi"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(storagemetrics.New(st, nil))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "progressdb_commit_batch_writes" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != 4 || h.GetSampleSum() != 4 || h.GetBucket()[0].GetUpperBound() != 1 || h.GetBucket()[0].GetCumulativeCount() != 4 {
			t.Fatalf("four lone writes: histogram %v", h)
		}
		return
	}
	t.Fatal("no progressdb_commit_batch_writes")
}
