package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// TestShardRetentionUnderOwnership: a shard's retention run holds the
// shard's ownership as its lease: it purges the shard's database under the
// ownership's epoch, writes its audit file into the shard's own folder with
// shard and epoch in the header, and a node that does not own the shard
// cannot run it.
func TestShardRetentionUnderOwnership(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := Keys{Name: "chat"}
	if err := CreateCluster(ctx, srv.Client(t), k, 2, []string{"node-a", "node-b"}); err != nil {
		t.Fatal(err)
	}
	owners := map[string]*Owner{}
	for _, node := range []string{"node-a", "node-b"} {
		w, err := StartOwner(ctx, OwnerOptions{Client: srv.Client(t), Keys: k, Node: node, Owner: node + "/1", TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		owners[node] = w
	}
	epoch, err := owners["node-a"].WaitOwned(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	st, wctx := fencedShardStore(t, ctx, owners["node-a"], filepath.Join(dir, "data"), 0)
	for _, tid := range []string{"gone", "kept"} {
		if _, err := st.CreateThread(wctx, store.Thread{ID: tid, Title: "x", Author: "y"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.DeleteThread(wctx, "gone"); err != nil {
		t.Fatal(err)
	}

	auditRoot := filepath.Join(dir, "audit")
	runner := func(w *Owner) *retention.Runner {
		n := 0
		r, err := retention.NewRunner(retention.RunnerOptions{
			Store:       st,
			Config:      config.Retention{Enabled: true, Period: 24 * time.Hour, AuditPath: ShardAuditPath(auditRoot, n)},
			Now:         func() time.Time { return time.Now().Add(48 * time.Hour) },
			Coordinator: w.Coordinator(n),
			Fenced:      true,
			Shard:       &n,
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	if _, err := runner(owners["node-b"]).Run(ctx, retention.RunRequest{Trigger: retention.TriggerCLI}); !errors.Is(err, retention.ErrLeaseHeld) {
		t.Fatalf("run on a node that does not own the shard = %v, want ErrLeaseHeld", err)
	}
	res, err := runner(owners["node-a"]).Run(ctx, retention.RunRequest{Trigger: retention.TriggerCLI})
	if err != nil || res.Status != audit.RunCompleted || res.Purged != 1 {
		t.Fatalf("run = %+v, %v", res, err)
	}
	if !strings.HasPrefix(res.AuditFile, filepath.Join(auditRoot, "shards", "0")+string(filepath.Separator)) {
		t.Fatalf("audit file %s is not in the shard's folder", res.AuditFile)
	}
	if _, err := st.GetThread(ctx, "gone"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("purged thread: %v", err)
	}
	data, err := os.ReadFile(res.AuditFile)
	if err != nil {
		t.Fatal(err)
	}
	var h audit.Header
	if err := json.Unmarshal([]byte(strings.SplitN(string(data), "\n", 2)[0]), &h); err != nil {
		t.Fatal(err)
	}
	if h.Shard == nil || *h.Shard != 0 || h.Epoch != epoch {
		t.Fatalf("header shard %v epoch %d, want shard 0 and the ownership's epoch %d", h.Shard, h.Epoch, epoch)
	}
	if err := audit.VerifyFile(res.AuditFile); err != nil {
		t.Fatalf("audit file does not verify: %v", err)
	}
	if got := st.Epoch(); got != epoch {
		t.Fatalf("store epoch %d, want the ownership's %d", got, epoch)
	}
	// The run released its lease, not the ownership.
	if e, err := owners["node-a"].Epoch(0); err != nil || e != epoch {
		t.Fatalf("ownership after the run: %d, %v", e, err)
	}
}

// TestShardRetentionReportsFencedWrites: a run whose writes carry an epoch
// older than the newest the shard's database has seen (the shard was
// fenced for a newer owner) is interrupted, purges nothing, and reports
// the refusal (progressdb_cluster_fencing_rejections_total).
func TestShardRetentionReportsFencedWrites(t *testing.T) {
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
	var fenced []error
	n := 0
	r, err := retention.NewRunner(retention.RunnerOptions{
		Store:       st,
		Config:      config.Retention{Enabled: true, Period: 24 * time.Hour, AuditPath: ShardAuditPath(t.TempDir(), n)},
		Now:         func() time.Time { return time.Now().Add(48 * time.Hour) },
		Coordinator: w.Coordinator(n),
		Fenced:      true,
		Shard:       &n,
		OnFenced:    func(err error) { fenced = append(fenced, err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	res, _ := r.Run(ctx, retention.RunRequest{Trigger: retention.TriggerCLI})
	if res.Status != audit.RunInterrupted || res.Purged != 0 {
		t.Fatalf("run under a raised fence: %+v", res)
	}
	if len(fenced) != 1 || !errors.Is(fenced[0], store.ErrFenced) {
		t.Fatalf("fenced writes reported: %v, want one ErrFenced", fenced)
	}
	if _, err := st.GetThread(ctx, "gone"); err != nil {
		t.Fatalf("thread purged through the fence: %v", err)
	}
}

// fencedShardStore opens shard n's database under dbPath for w, which
// already owns the shard, with a context carrying w's ownership epoch for
// its writes; the database closes when the test ends.
func fencedShardStore(t *testing.T, ctx context.Context, w *Owner, dbPath string, n int) (*store.Store, context.Context) {
	t.Helper()
	sh, err := OpenShards(dbPath, []int{n}, store.Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Close() })
	st, _ := sh.Store(n)
	wctx, err := w.Fence(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	return st, wctx
}

// deletedThreads creates each thread and deletes it, leaving it for a
// retention run to purge.
func deletedThreads(t *testing.T, ctx context.Context, st *store.Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := st.CreateThread(ctx, store.Thread{ID: id, Title: "x", Author: "y"}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.DeleteThread(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

// startOneNode creates cluster k of one shard on one node, node-a, and
// starts its owner, which it returns once it owns the shard, with the
// shard's epoch; the owner closes when the test ends.
func startOneNode(t *testing.T, ctx context.Context, srv *etcdtest.Server, k Keys) (*Owner, int64) {
	t.Helper()
	if err := CreateCluster(ctx, srv.Client(t), k, 1, []string{"node-a"}); err != nil {
		t.Fatal(err)
	}
	w, err := StartOwner(ctx, OwnerOptions{Client: srv.Client(t), Keys: k, Node: "node-a", Owner: "node-a/1", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	epoch, err := w.WaitOwned(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return w, epoch
}
