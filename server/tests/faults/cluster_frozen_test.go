package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

var fencingRejections = regexp.MustCompile(`(?m)^progressdb_cluster_fencing_rejections_total (\S+)$`)

// signal sends sig to p, failing the test if it cannot.
func signal(t testing.TB, p *proc, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to %s: %v", sig, p, err)
	}
}

// TestFaultClusterNodeFrozen freezes node-3 with SIGSTOP in the middle of
// its shard's purge, past its ownership's lease: etcd expires the
// ownership and the shard answers 503 through the other nodes. Only a
// shard's home takes its ownership (a move needs the frozen home's own
// steps, so nothing else can take the shard over), so the deposed process
// itself, resumed with SIGCONT, takes the shard again under a new epoch;
// in the long mode a move asked meanwhile fails and leaves it there.
// The run it was in stops without completing, the next run finishes the
// purge with exact audit, and the shard's database, which has seen the new
// epoch, refuses every batch carrying the old one (a write, a thread, a
// fence raise) and keeps nothing of them.
func TestFaultClusterNodeFrozen(t *testing.T) {
	t.Parallel()
	spec := crashSpec()
	for i := range pick(1, max(2, suite.trials/10)) {
		t.Run(fmt.Sprintf("trial_%d", i), func(t *testing.T) {
			rng := trialRand(t, i)
			_, s, fx, before, nodes := startPurgeCluster(t, spec, rng)
			old := clusterState(t, nodes[0]).Shards[2].Epoch

			runID := startShardRuns(t, nodes[0])
			k := 1 + rng.IntN(max(1, len(fx.due)/2))
			waitFor(t, 2*time.Minute, fmt.Sprintf("run %s to record %d items", runID, k), func() bool {
				f := fileOfRun(readAudit(t, s.audit), runID)
				return f != nil && len(f.items) >= k
			})
			signal(t, nodes[2].proc, syscall.SIGSTOP)
			t.Cleanup(func() { _ = nodes[2].cmd.Process.Signal(syscall.SIGCONT) })
			if f := fileOfRun(readAudit(t, s.audit), runID); f == nil || f.sealed {
				t.Fatalf("run %s finished before the freeze: the fixture is too small", runID)
			}
			waitFor(t, time.Minute, "the frozen node's ownership to expire in etcd", func() bool {
				sh := clusterState(t, nodes[0]).Shards[2]
				return sh.Owner == "" && sh.Epoch == 0
			})
			code, body := nodes[0].call(t, "GET", "/v1/threads/"+threadInShard(2, 0)+"/messages", nil, "")
			if code != http.StatusServiceUnavailable {
				t.Fatalf("shard 2 with its owner frozen past its lease: %d %s", code, body)
			}

			if suite.long {
				// A move of the shard needs its home's own steps: asked while
				// the home is frozen, it fails once the call to the home times
				// out (30 s) and leaves the shard where it was.
				code, body := nodes[0].call(t, "POST", "/admin/cluster/shards/2/move", map[string]string{"to": "node-1"}, adminToken)
				if code != http.StatusServiceUnavailable {
					t.Fatalf("moving shard 2 off its frozen home: %d %s", code, body)
				}
				if home := clusterState(t, nodes[0]).Shards[2].Home; home != "node-3" {
					t.Fatalf("shard 2's home after a failed move: %s", home)
				}
			}
			signal(t, nodes[2].proc, syscall.SIGCONT)
			var epoch int64
			waitFor(t, time.Minute, "node-3 to take its shard again", func() bool {
				sh := clusterState(t, nodes[0]).Shards[2]
				epoch = sh.Epoch
				return sh.Owner == "node-3" && epoch > old
			})
			waitFor(t, time.Minute, "the frozen run to end", func() bool {
				f := fileOfRun(readAudit(t, s.audit), runID)
				return f != nil && f.sealed
			})
			if f := fileOfRun(readAudit(t, s.audit), runID); f.footer == nil || f.footer.Status == audit.RunCompleted {
				t.Fatalf("the run under epoch %d went on past the freeze: footer %+v", old, f.footer)
			}
			runAllShards(t, nodes[1])
			resp, err := httpClient.Get(nodes[2].url + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			metrics, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			m := fencingRejections.FindStringSubmatch(string(metrics))
			if m == nil {
				t.Fatalf("node-3 reports no progressdb_cluster_fencing_rejections_total")
			}
			t.Logf("node-3: epoch %d → %d, progressdb_cluster_fencing_rejections_total %s", old, epoch, m[1])
			for _, n := range nodes {
				if code := n.stop(t); code != 0 {
					t.Fatalf("node exit status %d after SIGTERM\n%s", code, n.output())
				}
			}
			checkInvariants(t, s, fx, before, nil)

			// The late batches of the deposed epoch, against the shard's
			// database as the processes left it.
			st := openStore(t, s.db)
			if got := st.Epoch(); got < epoch {
				t.Fatalf("shard 2's database has seen epoch %d, not the new owner's %d", got, epoch)
			}
			// A thread of the current epoch for the late write to target.
			const tid = "late-target"
			if _, err := st.CreateThread(store.WithEpoch(context.Background(), st.Epoch()), store.Thread{ID: tid, Title: "t", Author: "a"}); err != nil {
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			settled := snapshotLive(t, s.db)
			st = openStore(t, s.db)
			late := store.WithEpoch(context.Background(), old)
			if _, err := st.AppendMessage(late, tid, store.Message{Author: "late", Body: []byte(`"late"`)}); !errors.Is(err, store.ErrFenced) {
				t.Errorf("a write under the old epoch %d: %v, want store.ErrFenced", old, err)
			}
			if _, err := st.CreateThread(late, store.Thread{ID: "late-thread", Title: "t", Author: "late"}); !errors.Is(err, store.ErrFenced) {
				t.Errorf("a thread under the old epoch %d: %v, want store.ErrFenced", old, err)
			}
			if err := st.RaiseFence(context.Background(), old); !errors.Is(err, store.ErrFenced) {
				t.Errorf("raising the fence back to %d: %v, want store.ErrFenced", old, err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if after := snapshotLive(t, s.db); len(after.keys) != len(settled.keys) {
				t.Errorf("refused batches left keys behind: %d keys, %d before", len(after.keys), len(settled.keys))
			}
		})
	}
}
