package cluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// TestPauseIsClusterWide: the pause switch set through one node's runner
// (as PUT /admin/retention/pause does) lives in etcd, not in the shard's
// database: every shard's runner, on every node, sees it and refuses to
// purge; resumed through another node, both purge again.
func TestPauseIsClusterWide(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := Keys{Name: "chat"}
	if err := CreateCluster(ctx, srv.Client(t), k, 2, []string{"node-a", "node-b"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	type shardNode struct {
		st     *store.Store
		runner *retention.Runner
	}
	nodes := make([]shardNode, 2)
	for n, node := range []string{"node-a", "node-b"} {
		c := srv.Client(t)
		w, err := StartOwner(ctx, OwnerOptions{Client: c, Keys: k, Node: node, Owner: node + "/1", TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		if _, err := w.WaitOwned(ctx, n, 0); err != nil {
			t.Fatal(err)
		}
		st, wctx := fencedShardStore(t, ctx, w, filepath.Join(dir, node), n)
		deletedThreads(t, wctx, st, "gone-1", "gone-2")
		shard := n
		r, err := retention.NewRunner(retention.RunnerOptions{
			Store:       st,
			Config:      config.Retention{Enabled: true, Period: 24 * time.Hour, AuditPath: ShardAuditPath(filepath.Join(dir, "audit-"+node), n)},
			Now:         func() time.Time { return time.Now().Add(48 * time.Hour) },
			Coordinator: w.Coordinator(n),
			Fenced:      true,
			Shard:       &shard,
			// Every read asks etcd: the test reads on one node right
			// after a switch on another.
			Pause: &Pause{Client: c, Keys: k, MaxAge: -1},
		})
		if err != nil {
			t.Fatal(err)
		}
		nodes[n] = shardNode{st: st, runner: r}
	}

	st, err := nodes[0].runner.SetPause(ctx, true, "incident 42")
	if err != nil || !st.Paused || st.Reason != "incident 42" || st.PausedAt.IsZero() {
		t.Fatalf("pause: %+v, %v", st, err)
	}
	for n, sn := range nodes {
		if _, err := sn.runner.Run(ctx, retention.RunRequest{Trigger: retention.TriggerCLI}); !errors.Is(err, retention.ErrPaused) {
			t.Fatalf("shard %d run while paused = %v, want ErrPaused", n, err)
		}
		if got, err := sn.runner.Pause(ctx); err != nil || !got.Paused || got.Reason != "incident 42" {
			t.Fatalf("shard %d pause state %+v, %v", n, got, err)
		}
		// The switch is the cluster's: the shard's own database holds none.
		if p, err := sn.st.RetentionPause(ctx); err != nil || p.Paused {
			t.Fatalf("shard %d database pause %+v, %v", n, p, err)
		}
		if _, err := sn.st.GetThread(ctx, "gone-1"); err != nil {
			t.Fatalf("shard %d purged while paused: %v", n, err)
		}
	}
	// A dry run still works while paused.
	if res, err := nodes[1].runner.Run(ctx, retention.RunRequest{Trigger: retention.TriggerCLI, DryRun: true}); err != nil || res.Eligible != 2 {
		t.Fatalf("dry run while paused: %+v, %v", res, err)
	}
	// Pausing again keeps the first paused_at.
	again, err := nodes[1].runner.SetPause(ctx, true, "still")
	if err != nil || !again.PausedAt.Equal(st.PausedAt.Time) || again.Reason != "still" {
		t.Fatalf("second pause %+v (first %+v), %v", again, st, err)
	}

	if st, err := nodes[1].runner.SetPause(ctx, false, ""); err != nil || st.Paused || !st.PausedAt.IsZero() {
		t.Fatalf("resume: %+v, %v", st, err)
	}
	for n, sn := range nodes {
		res, err := sn.runner.Run(ctx, retention.RunRequest{Trigger: retention.TriggerCLI})
		if err != nil || res.Status != audit.RunCompleted || res.Purged != 2 {
			t.Fatalf("shard %d run after resume: %+v, %v", n, res, err)
		}
	}
}

// TestPauseUnreadableCountsAsPaused: a switch that cannot be read (etcd
// out of reach, a record that is not one) stops deletes; a malformed record
// is replaced by the next switch.
func TestPauseUnreadableCountsAsPaused(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := Keys{Name: "chat"}
	c := srv.DirectClient(t)
	if _, err := c.Put(ctx, k.RetentionPause(), "not json"); err != nil {
		t.Fatal(err)
	}
	p := &Pause{Client: c, Keys: k}
	if got, err := p.Get(ctx); !got.Paused || !errors.Is(err, store.ErrMalformed) {
		t.Fatalf("malformed record: %+v, %v", got, err)
	}
	if got, err := p.Set(ctx, false, ""); err != nil || got.Paused {
		t.Fatalf("resume over a malformed record: %+v, %v", got, err)
	}
	if got, err := p.Get(ctx); err != nil || got.Paused {
		t.Fatalf("after resume: %+v, %v", got, err)
	}

	var failed []error
	cut := &Pause{Client: srv.Client(t), Keys: k, OnError: func(err error) { failed = append(failed, err) }}
	srv.Partition()
	shortCtx, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	if got, err := cut.Get(shortCtx); !got.Paused || err == nil {
		t.Fatalf("etcd out of reach: %+v, %v", got, err)
	}
	if len(failed) != 1 {
		t.Fatalf("etcd errors reported: %v, want the one read", failed)
	}
}

// pausedByAnother is the cluster's switch as one node's runner reads it,
// with another node pausing the cluster (a real write to etcd through its
// own client) just before the runner's read number at.
type pausedByAnother struct {
	*Pause
	other *Pause
	at    int64
	reads *atomic.Int64
}

func (p pausedByAnother) Get(ctx context.Context) (store.RetentionPause, error) {
	if p.reads.Add(1) == p.at {
		if _, err := p.other.Set(ctx, true, "paused from node-b"); err != nil {
			return store.RetentionPause{Paused: true}, err
		}
	}
	return p.Pause.Get(ctx)
}

func (p pausedByAnother) GetAtBatch(ctx context.Context) (store.RetentionPause, error) {
	if p.reads.Add(1) == p.at {
		if _, err := p.other.Set(ctx, true, "paused from node-b"); err != nil {
			return store.RetentionPause{Paused: true}, err
		}
	}
	return p.Pause.GetAtBatch(ctx)
}

// TestClusterPauseStopsARunGoing: a run going on one node stops at its
// next batch once another node pauses the cluster, with what it purged so
// far accounted; after the resume a run purges the rest.
func TestClusterPauseStopsARunGoing(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := Keys{Name: "chat"}
	w, _ := startOneNode(t, ctx, srv, k)
	st, wctx := fencedShardStore(t, ctx, w, filepath.Join(t.TempDir(), "data"), 0)
	const threads = 30
	for i := range threads {
		deletedThreads(t, wctx, st, fmt.Sprintf("gone-%02d", i))
	}
	// The runner's batch reads ask etcd every time (MaxAge < 0), so the
	// run stops at the batch after the pause; TestPauseBatchReadsAge
	// covers the reads a run trusts for a while.
	sw := pausedByAnother{Pause: &Pause{Client: srv.Client(t), Keys: k, MaxAge: -1}, other: &Pause{Client: srv.Client(t), Keys: k},
		at: 4, reads: new(atomic.Int64)}
	n := 0
	r, err := retention.NewRunner(retention.RunnerOptions{
		Store:       st,
		Config:      config.Retention{Enabled: true, Period: 24 * time.Hour, BatchSize: 1, AuditPath: ShardAuditPath(t.TempDir(), n)},
		Now:         func() time.Time { return time.Now().Add(48 * time.Hour) },
		Coordinator: w.Coordinator(n),
		Fenced:      true,
		Shard:       &n,
		Pause:       sw,
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(ctx, retention.RunRequest{Trigger: retention.TriggerCLI})
	if res.Status != audit.RunInterrupted || res.Purged == 0 || res.Purged >= threads {
		t.Fatalf("run paused from another node: %+v, %v", res, err)
	}
	if err := audit.VerifyFile(res.AuditFile); err != nil {
		t.Fatalf("the paused run's audit file: %v", err)
	}
	if _, err := sw.other.Set(ctx, false, ""); err != nil {
		t.Fatal(err)
	}
	rest, err := r.Run(ctx, retention.RunRequest{Trigger: retention.TriggerCLI})
	if err != nil || rest.Status != audit.RunCompleted || res.Purged+rest.Purged != threads {
		t.Fatalf("run after the resume: %+v, %v (first purged %d)", rest, err, res.Purged)
	}
}

// TestPauseBatchReadsAge: between batches a node trusts its last read of
// the switch for MaxAge, so a pause set on another node is seen there at
// the latest MaxAge later; a read before a run (Get) always asks etcd, and
// a node sees its own switch at once.
func TestPauseBatchReadsAge(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	k := Keys{Name: "chat"}
	a := &Pause{Client: srv.Client(t), Keys: k, MaxAge: time.Hour}
	b := &Pause{Client: srv.Client(t), Keys: k}
	if p, err := a.GetAtBatch(ctx); err != nil || p.Paused {
		t.Fatalf("first read: %+v, %v", p, err)
	}
	if _, err := b.Set(ctx, true, "from b"); err != nil {
		t.Fatal(err)
	}
	if p, err := a.GetAtBatch(ctx); err != nil || p.Paused {
		t.Fatalf("a batch read within MaxAge asked etcd: %+v, %v", p, err)
	}
	if p, err := a.Get(ctx); err != nil || !p.Paused {
		t.Fatalf("a read before a run did not ask etcd: %+v, %v", p, err)
	}
	if p, err := a.GetAtBatch(ctx); err != nil || !p.Paused {
		t.Fatalf("a batch read after a fresh read: %+v, %v", p, err)
	}
	if _, err := a.Set(ctx, false, ""); err != nil {
		t.Fatal(err)
	}
	if p, err := a.GetAtBatch(ctx); err != nil || p.Paused {
		t.Fatalf("a node's own resume not seen at once: %+v, %v", p, err)
	}
}
