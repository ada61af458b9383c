package cluster

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/replica"
)

// A node's progress report holds what its replicas say, follows them
// every period, and goes at once when the node stops.
func TestProgressReportFollowsTheReplicas(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	direct := srv.DirectClient(t)
	k := Keys{Name: "chat"}
	var mu sync.Mutex
	applied := uint64(7)
	statuses := func() []replica.GroupStatus {
		mu.Lock()
		defer mu.Unlock()
		return []replica.GroupStatus{{Group: 3, Replica: 31, Role: replica.RoleLeader, Leader: 31, Term: 2, Applied: applied,
			Peers: []replica.PeerStatus{{Replica: 31, Match: applied, Active: true}, {Replica: 32, Match: 4, Lag: applied - 4}}}}
	}
	p, err := NewProgressReporter(ProgressOptions{Client: srv.Client(t), Keys: k, Node: "a", TTL: 2 * time.Second,
		Every: 20 * time.Millisecond, Statuses: statuses, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	p.Start(context.Background())
	read := func() (ProgressReport, bool) {
		get, err := direct.Get(context.Background(), k.Progress("a"))
		if err != nil {
			t.Fatal(err)
		}
		if len(get.Kvs) == 0 {
			return ProgressReport{}, false
		}
		r, err := ParseProgress(get.Kvs[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		return r, true
	}
	waitFor(t, "the report of applied index 7", func() bool {
		r, ok := read()
		return ok && r.Node == "a" && len(r.Groups) == 1 && r.Groups[0].Applied == 7 && r.Groups[0].Peers[1].Lag == 3
	})
	mu.Lock()
	applied = 9
	mu.Unlock()
	waitFor(t, "the report of applied index 9", func() bool {
		r, ok := read()
		return ok && r.Groups[0].Applied == 9 && r.Groups[0].Peers[1].Lag == 5
	})
	p.Stop()
	if _, ok := read(); ok {
		t.Fatal("a stopped node's report is still in etcd")
	}
}
