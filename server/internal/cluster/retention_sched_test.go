package cluster

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// TestShardScheduledRetentionReportsFencedWrites: a scheduled run (not
// only one asked through the admin API) whose purge batch the shard's
// fence refuses reports it (OnFenced: progressdb_cluster_fencing_rejections_total
// on a node) and purges nothing.
func TestShardScheduledRetentionReportsFencedWrites(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := Keys{Name: "chat"}
	w, epoch := startOneNode(t, ctx, srv, k)
	st, wctx := fencedShardStore(t, ctx, w, filepath.Join(t.TempDir(), "data"), 0)
	deletedThreads(t, wctx, st, "gone")
	if err := st.RaiseFence(ctx, epoch+1000); err != nil {
		t.Fatal(err)
	}
	fenced := make(chan error, 16)
	n := 0
	auditPath := ShardAuditPath(t.TempDir(), n)
	r, err := retention.NewRunner(retention.RunnerOptions{
		Store:       st,
		Config:      config.Retention{Enabled: true, Period: 24 * time.Hour, AuditPath: auditPath},
		Now:         func() time.Time { return time.Now().Add(48 * time.Hour) },
		Coordinator: w.Coordinator(n),
		Fenced:      true,
		Shard:       &n,
		OnFenced:    func(err error) { fenced <- err },
	})
	if err != nil {
		t.Fatal(err)
	}
	sched, err := retention.NewScheduler(retention.SchedulerOptions{Runner: r, Spec: "@every 1s", AuditPath: auditPath})
	if err != nil {
		t.Fatal(err)
	}
	sched.Start(ctx)
	defer sched.Stop()
	select {
	case err := <-fenced:
		if !errors.Is(err, store.ErrFenced) {
			t.Fatalf("reported %v, want ErrFenced", err)
		}
	case <-ctx.Done():
		t.Fatal("no scheduled run reported a fenced write")
	}
	sched.Stop()
	if _, err := st.GetThread(ctx, "gone"); err != nil {
		t.Fatalf("thread purged through the fence: %v", err)
	}
}
