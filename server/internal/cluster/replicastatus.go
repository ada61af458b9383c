package cluster

import "github.com/progressdb/progressdb/server/internal/replica"

// ReplicaStatus is one replica of a replicated shard in `cluster status`
// and GET /admin/cluster (spec §15): its role and applied index as its
// node last reported them, its lag as the shard's leader last did.
type ReplicaStatus struct {
	ID   uint64 `json:"id"`
	Node string `json:"node"`
	// Role: leader, follower, candidate, pre_candidate, or unknown while
	// its node reports nothing of it (down, or not running it yet).
	Role    string `json:"role"`
	Applied uint64 `json:"applied"`
	// Lag is how many entries of the leader's log it lacks.
	Lag uint64 `json:"lag"`
	// Active: the leader heard from it within its last election timeout.
	Active bool `json:"active"`
}

// RoleUnknown is the role of a replica whose node reports nothing of it.
const RoleUnknown = "unknown"

// ReplicaState is what the cluster knows of replicated shards in etcd:
// the registered nodes, the leader records and the nodes' progress
// reports. Both ReadStatus and a node's view read replicas through it.
type ReplicaState struct {
	Alive   map[string]bool
	Leaders map[int]Leader
	Reports map[string]ProgressReport
}

// report returns node's report of shard n's group.
func (s ReplicaState) report(node string, n int) (replica.GroupStatus, bool) {
	for _, g := range s.Reports[node].Groups {
		if g.Group == uint64(n) {
			return g, true
		}
	}
	return replica.GroupStatus{}, false
}

// Replicas returns shard n's replicas as the map's set names them, and
// whether the shard is under-replicated: fewer of them are healthy than
// the map asks for. A replica is healthy when its node runs and the
// leader, as recorded in etcd and in its own report, heard from it
// recently as a voter, and it is not leaving its set; without a leader
// none is.
func (s ReplicaState) Replicas(m Map, n int) ([]ReplicaStatus, bool) {
	if !m.Grouped(n) {
		// Owned by its home: under-replicated while more are asked for.
		return nil, m.Growing(n)
	}
	var lead replica.GroupStatus
	if l, ok := s.Leaders[n]; ok {
		if g, ok := s.report(l.Node, n); ok && g.Role == replica.RoleLeader && g.Replica == l.Replica {
			lead = g
		}
	}
	out := make([]ReplicaStatus, 0, len(m.Sets[n]))
	healthy := 0
	for _, r := range m.Sets[n] {
		rs := ReplicaStatus{ID: r.ID, Node: r.Node, Role: RoleUnknown}
		if g, ok := s.report(r.Node, n); ok && g.Replica == r.ID && s.Alive[r.Node] {
			rs.Role, rs.Applied = g.Role, g.Applied
		}
		for _, p := range lead.Peers {
			if p.Replica == r.ID {
				rs.Lag, rs.Active = p.Lag, p.Active
				if p.Active && !p.Learner && s.Alive[r.Node] && !r.Leaving {
					healthy++
				}
			}
		}
		out = append(out, rs)
	}
	return out, healthy < m.ReplicaCount()
}

// UnderReplicated counts the shards Replicas finds under-replicated.
func (s ReplicaState) UnderReplicated(m Map) int {
	if !m.Replicated() {
		return 0
	}
	count := 0
	for n := range m.Shards {
		if _, under := s.Replicas(m, n); under {
			count++
		}
	}
	return count
}
