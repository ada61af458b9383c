package cluster

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Replica sets of replicated shards (docs/replication-design.md §3, §8):
// with `cluster create --replicas N` (N > 1) each shard is a Raft group
// of N replicas on distinct nodes, each with a Raft ID that is never
// reused.

// Replica is one replica of a shard: its Raft ID and the node running it.
type Replica struct {
	ID   uint64 `json:"id"`
	Node string `json:"node"`
	// Added: the replica joined the running group (a move, set-replicas,
	// a dead node's replacement) rather than being one of its first
	// voters: its node starts it empty, waiting for the leader's
	// snapshot, and never bootstraps it.
	Added bool `json:"added,omitempty"`
	// Leaving: the replica is to be removed from its group. It stays in
	// the set, so that the others still reach its node, until the
	// group's leader applied its removal (membership.go).
	Leaving bool `json:"leaving,omitempty"`
}

// ReplicaIDs is the key of the next Raft replica ID to hand out: a
// counter that only grows, so that no ID is ever given twice.
func (k Keys) ReplicaIDs() string { return "/" + k.Name + "/replicas/next" }

// ErrReplicaCount refuses a replica count: not 1, 3 or 5, more than
// the nodes named, or another than the cluster was created with.
var ErrReplicaCount = errors.New("invalid replica count")

// ReplicaCountError is returned (wrapping ErrReplicaCount) for a cluster
// created with another replica count.
type ReplicaCountError struct{ Recorded, Asked int }

func (e *ReplicaCountError) Error() string {
	return fmt.Sprintf("the cluster was created with %d replicas per shard, not %d", e.Recorded, e.Asked)
}

func (e *ReplicaCountError) Unwrap() error { return ErrReplicaCount }

// ErrReplicatedHeld refuses a replicated cluster while a node already
// holds shard folders: replicas start empty, and turning a cluster's
// existing shards into groups is not built.
var ErrReplicatedHeld = errors.New("a replicated cluster starts from nodes holding no shard")

// ErrReplicated refuses on a replicated shard an operation that is built
// only for shards of one replica (moves, the commands run in a stopped
// node's place).
var ErrReplicated = errors.New("not built for replicated shards")

// CheckReplicas checks a replica count for nodes: 1, 3 or 5, and no
// more than the nodes, since a shard's replicas are on distinct nodes.
func CheckReplicas(replicas, nodes int) error {
	switch {
	case replicas != 1 && replicas != 3 && replicas != 5:
		return fmt.Errorf("%w: %d replicas: 1, 3 or 5 (an odd number keeps a majority when one or two are lost)",
			ErrReplicaCount, replicas)
	case replicas > nodes:
		return fmt.Errorf("%w: %d replicas need as many nodes, %d named: each replica of a shard is on its own node",
			ErrReplicaCount, replicas, nodes)
	}
	return nil
}

// placeReplicas gives shard n's replicas to r distinct nodes, round
// robin from the shard's home nodes[n mod len(nodes)], so that each node
// leads and follows about as many shards; IDs are first, first+1, ….
func placeReplicas(shards, r int, nodes []string, first uint64) [][]Replica {
	sets := make([][]Replica, shards)
	id := first
	for n := range sets {
		sets[n] = make([]Replica, r)
		for i := range r {
			sets[n][i] = Replica{ID: id, Node: nodes[(n+i)%len(nodes)]}
			id++
		}
	}
	return sets
}

// replicaIDs reads the counter's value and the comparison that it is
// unchanged when the caller's transaction commits.
func replicaIDs(resp *clientv3.GetResponse, k Keys) (uint64, clientv3.Cmp, error) {
	key := k.ReplicaIDs()
	if len(resp.Kvs) == 0 {
		return 1, clientv3.Compare(clientv3.CreateRevision(key), "=", 0), nil
	}
	next, err := strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
	if err != nil || next < 1 {
		return 0, clientv3.Cmp{}, fmt.Errorf("%s holds %q, not a replica ID", key, resp.Kvs[0].Value)
	}
	return next, clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision), nil
}

// ReplicaCount is the replicas each shard has, or is to have: 1 for a
// map without any.
func (m Map) ReplicaCount() int { return max(m.Replicas, 1) }

// Replicated reports whether the cluster has Raft groups or is to have
// them (ReplicaCount > 1): its nodes run replicas.
func (m Map) Replicated() bool {
	return m.ReplicaCount() > 1 || slices.ContainsFunc(m.Sets, func(s []Replica) bool { return len(s) > 0 })
}

// Grouped reports whether shard n is a Raft group (its set names its
// replicas): leadership, not an ownership lease, decides who serves it.
// A shard without a set has one copy, owned by its home (spec §11),
// until its home makes it a group (grow.go).
func (m Map) Grouped(n int) bool { return n >= 0 && n < len(m.Sets) && len(m.Sets[n]) > 0 }

// Growing reports whether shard n is to become a group: the cluster asks
// for more than one replica and the shard is still owned by its home.
func (m Map) Growing(n int) bool {
	return m.ReplicaCount() > 1 && n >= 0 && n < m.Shards && !m.Grouped(n)
}

// ReplicaOn returns shard n's replica on node, if its set names it (a
// leaving one included: it runs until its group removed it). A node may
// hold a leaving replica and the one replacing it (a lost folder:
// ReplaceLost): the staying one is returned.
func (m Map) ReplicaOn(n int, node string) (Replica, bool) {
	if n < 0 || n >= len(m.Sets) {
		return Replica{}, false
	}
	var found Replica
	ok := false
	for _, r := range m.Sets[n] {
		if r.Node == node && (!ok || found.Leaving) {
			found, ok = r, true
		}
	}
	return found, ok
}

// ReplicaNode names the node running the replica of Raft ID id.
func (m Map) ReplicaNode(id uint64) (string, bool) {
	for _, set := range m.Sets {
		for _, r := range set {
			if r.ID == id {
				return r.Node, true
			}
		}
	}
	return "", false
}

// Voters are shard n's first voters' replica IDs (those not Added):
// what a new log of one of them is bootstrapped with.
func (m Map) Voters(n int) []uint64 {
	if n < 0 || n >= len(m.Sets) {
		return nil
	}
	var ids []uint64
	for _, r := range m.Sets[n] {
		if !r.Added {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// Desired is shard n's replicas that are to stay (not Leaving): the
// membership its group's leader moves the group towards.
func (m Map) Desired(n int) []Replica {
	if n < 0 || n >= len(m.Sets) {
		return nil
	}
	var out []Replica
	for _, r := range m.Sets[n] {
		if !r.Leaving {
			out = append(out, r)
		}
	}
	return out
}

// validReplicas checks a replicated map read from etcd: a set per shard,
// empty for a shard still owned by its home, else on distinct nodes
// (but for a leaving replica whose node holds the one replacing it:
// ReplaceLost), ReplicaCount of them staying, IDs non-zero and distinct,
// the home the node of the set's first staying replica.
func (m Map) validReplicas() bool {
	if !m.Replicated() {
		return len(m.Sets) == 0
	}
	if len(m.Sets) != m.Shards {
		return false
	}
	seen := map[uint64]bool{}
	for n, set := range m.Sets {
		if len(set) == 0 {
			continue
		}
		stay := m.Desired(n)
		if len(stay) != m.ReplicaCount() || stay[0].Node != m.Homes[n] {
			return false
		}
		staying, leaving := map[string]bool{}, map[string]bool{}
		for _, r := range set {
			on := staying
			if r.Leaving {
				on = leaving
			}
			if r.ID == 0 || seen[r.ID] || r.Node == "" || on[r.Node] {
				return false
			}
			seen[r.ID] = true
			on[r.Node] = true
		}
	}
	return true
}

// replicasFrom completes a new map with replicas per shard: sets placed
// from the counter's value ids, the comparison that the counter is
// unchanged added to cmps and its advance to ops. Nodes reporting shard
// folders refuse it (ErrReplicatedHeld).
func replicasFrom(m *Map, reports map[string]Held, replicas int, ids *clientv3.GetResponse, k Keys,
	cmps *[]clientv3.Cmp, ops *[]clientv3.Op) error {
	for _, id := range slices.Sorted(maps.Keys(reports)) {
		if held := reports[id].Shards; len(held) > 0 {
			return fmt.Errorf("%w: node %s holds shard %d", ErrReplicatedHeld, id, held[0].Shard)
		}
	}
	first, cmp, err := replicaIDs(ids, k)
	if err != nil {
		return err
	}
	m.Replicas = replicas
	m.Sets = placeReplicas(m.Shards, replicas, m.Nodes, first)
	for n := range m.Homes {
		m.Homes[n] = m.Sets[n][0].Node
	}
	*cmps = append(*cmps, cmp)
	*ops = append(*ops, clientv3.OpPut(k.ReplicaIDs(), strconv.FormatUint(first+uint64(m.Shards*replicas), 10)))
	return nil
}
