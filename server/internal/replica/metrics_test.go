package replica_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// metric finds name in node i's registry, for shard g when it has a
// shard label.
func (c *testCluster) metric(i int, name string, g uint64) *dto.Metric {
	c.T.Helper()
	mfs, err := c.nodes[i].reg.Gather()
	if err != nil {
		c.T.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 0 {
				return m
			}
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "shard" && lp.GetValue() == strconv.FormatUint(g, 10) {
					return m
				}
			}
		}
	}
	c.T.Fatalf("node %d serves no %s for shard %d", i, name, g)
	return nil
}

// Each node's metrics follow its replica: the leader gauge is 1 on the
// serving leader alone, the applied index is the store's, every replica
// counted the leader it saw elected, and the proposer's histogram holds
// each write. When the leader's node stops, the survivors count the new
// leader and the gauge moves to it.
func TestMetricsFollowLeadership(t *testing.T) {
	c := newStoreCluster(t, 16)
	const g = 16
	ctx := context.Background()
	l := c.servingLeader(g)
	s := c.nodes[l].store(g)
	th := must(s.CreateThread(ctx, store.Thread{ID: "t", Title: "t", Author: "a"}))
	const writes = 4
	for k := range writes - 1 {
		must(s.AppendMessage(ctx, th.ID, store.Message{Author: "a", Body: body(fmt.Sprint(k))}))
	}
	c.caughtUp(g, l)
	changes := make([]float64, len(c.nodes))
	for i := range c.nodes {
		want := 0.0
		if i == l {
			want = 1
		}
		if got := c.metric(i, "progressdb_replica_leader", g).GetGauge().GetValue(); got != want {
			t.Errorf("node %d's leader gauge: %v, want %v", i, got, want)
		}
		if got := c.metric(i, "progressdb_replica_applied_index", g).GetGauge().GetValue(); got != float64(c.raftLog(i, g).Applied()) {
			t.Errorf("node %d's applied index gauge: %v, its log %d", i, got, c.raftLog(i, g).Applied())
		}
		changes[i] = c.metric(i, "progressdb_replica_leader_changes_seen_total", g).GetCounter().GetValue()
		if changes[i] < 1 {
			t.Errorf("node %d saw no leader elected", i)
		}
	}
	if n := c.metric(l, "progressdb_replica_proposal_duration_seconds", g).GetHistogram().GetSampleCount(); n != writes {
		t.Errorf("the leader timed %d proposals, want %d", n, writes)
	}

	c.stop(l)
	next := c.servingLeader(g, l)
	for i, nd := range c.nodes {
		if nd == nil {
			continue
		}
		c.WaitFor(fmt.Sprintf("node %d to count the new leader", i), func() bool {
			return c.metric(i, "progressdb_replica_leader_changes_seen_total", g).GetCounter().GetValue() > changes[i]
		})
	}
	if got := c.metric(next, "progressdb_replica_leader", g).GetGauge().GetValue(); got != 1 {
		t.Errorf("the new leader's gauge: %v", got)
	}
}

// A replica's status and metrics are read while a snapshot replaces its
// store and log: a scrape never reads the log being swapped, and after
// the install both show the new log's applied index.
func TestStatusReadsDuringASnapshot(t *testing.T) {
	c := newKeepingCluster(t, 5, 18)
	const g = 18
	l := c.servingLeader(g)
	must(c.nodes[l].store(g).CreateThread(context.Background(), store.Thread{ID: "t", Title: "t", Author: "ann"}))
	c.sameEverywhere(g, l)
	f := (l + 1) % 3
	c.stopBehind(g, l, f)
	c.start(f)
	h, reg := c.nodes[f].host, c.nodes[f].reg
	// Two readers: one scrapes, one asks for the status, each in a loop
	// until the snapshot is in.
	stop := make(chan struct{})
	errs := make(chan error, 2)
	for _, read := range []func() error{
		func() error { _, err := reg.Gather(); return err },
		func() error { _, err := h.GroupStatus(g); return err },
	} {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				if err := read(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	c.sameEverywhere(g, l)
	close(stop)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	want := c.raftLog(f, g).Applied()
	c.WaitFor("the status and the gauge at the new log's applied index", func() bool {
		st := must(h.GroupStatus(g))
		return st.Applied >= want && c.metric(f, "progressdb_replica_applied_index", g).GetGauge().GetValue() >= float64(want)
	})
}
