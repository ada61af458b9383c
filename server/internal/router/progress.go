package router

import (
	"maps"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
)

// progressOnly applies a watch response that only changed progress
// reports, and reports whether it did: every node reports every few
// seconds, and reading the whole cluster state again for each report
// would cost every node a read of every report.
func (v *View) progressOnly(events []*clientv3.Event) bool {
	prefix := v.prefix() + "progress/"
	for _, ev := range events {
		if !strings.HasPrefix(string(ev.Kv.Key), prefix) {
			return false
		}
	}
	if len(events) == 0 {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	// A copy: readers hold the state's maps without the lock.
	progress := maps.Clone(v.st.progress)
	if progress == nil {
		progress = map[string]cluster.ProgressReport{}
	}
	for _, ev := range events {
		node := strings.TrimPrefix(string(ev.Kv.Key), prefix)
		if ev.Type == clientv3.EventTypeDelete {
			delete(progress, node)
		} else if r, err := cluster.ParseProgress(ev.Kv.Value); err == nil && r.Node == node {
			progress[node] = r
		}
		// The watch starts again after the last event applied.
		v.st.rev = max(v.st.rev, ev.Kv.ModRevision)
	}
	v.st.progress = progress
	return true
}

// replicaState is what the view knows of the replicated shards.
func (st state) replicaState() cluster.ReplicaState {
	alive := make(map[string]bool, len(st.nodes))
	for id := range st.nodes {
		alive[id] = true
	}
	return cluster.ReplicaState{Alive: alive, Leaders: st.leaders, Reports: st.progress}
}

// UnderReplicated is the number of replicated shards with fewer healthy
// replicas than the cluster asks for, in this node's view
// (cluster.ReplicaState.Replicas); 0 for a cluster of one replica per
// shard.
func (v *View) UnderReplicated() int {
	st := v.state()
	return st.replicaState().UnderReplicated(st.m)
}
