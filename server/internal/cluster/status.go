package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Status is the cluster as etcd sees it (spec §11, GET /admin/cluster and
// progressdb cluster status).
type Status struct {
	Nodes  []NodeStatus  `json:"nodes"`
	Shards []ShardStatus `json:"shards"`
}

// NodeStatus is one node: named by the shard map or registered.
type NodeStatus struct {
	ID     string `json:"id"`
	URL    string `json:"url"`    // "" while it is not registered
	Alive  bool   `json:"alive"`  // registered by a running process
	Shards []int  `json:"shards"` // whose data it holds
}

// ShardStatus is one shard.
type ShardStatus struct {
	N     int    `json:"n"`
	Home  string `json:"home"`  // the node that holds its data
	Owner string `json:"owner"` // the node that owns it now, "" when none
	Epoch int64  `json:"epoch"` // the owner's fencing token, 0 when none
	// State: "owned", or "unavailable" while no node owns it (its home
	// is down or has not taken it yet): its requests answer 503.
	State string `json:"state"`
	// Replicas of a replicated shard (spec §15), whose owner is its
	// leader's node and whose epoch is the leader's term.
	Replicas []ReplicaStatus `json:"replicas,omitempty"`
	// UnderReplicated: fewer of its replicas are healthy than the
	// cluster asks for (ReplicaState.Replicas).
	UnderReplicated bool `json:"under_replicated,omitempty"`
}

// Shard states.
const (
	ShardOwned       = "owned"
	ShardUnavailable = "unavailable"
)

// ReadStatus reads the registered nodes, the map and the owners, all at one
// revision of etcd.
func ReadStatus(ctx context.Context, c *clientv3.Client, k Keys) (Status, error) {
	nodes, err := c.Get(ctx, k.Node(""), clientv3.WithPrefix())
	if err != nil {
		return Status{}, fmt.Errorf("read nodes: %w", err)
	}
	at := clientv3.WithRev(nodes.Header.Revision)
	m, err := readMap(ctx, c, k, at)
	if err != nil {
		return Status{}, err
	}
	shardPrefix := "/" + k.Name + "/shards/"
	owners, err := c.Get(ctx, shardPrefix, clientv3.WithPrefix(), at)
	if err != nil {
		return Status{}, fmt.Errorf("read shard owners: %w", err)
	}
	rs := ReplicaState{Alive: map[string]bool{}, Leaders: map[int]Leader{}, Reports: map[string]ProgressReport{}}
	if m.Replicated() {
		if rs.Reports, err = readProgress(ctx, c, k, at); err != nil {
			return Status{}, err
		}
	}

	byID := make(map[string]*NodeStatus)
	node := func(id string) *NodeStatus {
		if byID[id] == nil {
			byID[id] = &NodeStatus{ID: id, Shards: []int{}}
		}
		return byID[id]
	}
	for _, kv := range nodes.Kvs {
		var v holderValue
		if json.Unmarshal(kv.Value, &v) != nil {
			continue
		}
		n := node(strings.TrimPrefix(string(kv.Key), k.Node("")))
		n.URL, n.Alive = v.URL, true
		rs.Alive[n.ID] = true
	}
	st := Status{Shards: make([]ShardStatus, m.Shards)}
	for n, home := range m.Homes {
		if !m.Grouped(n) {
			node(home).Shards = append(node(home).Shards, n)
		}
		st.Shards[n] = ShardStatus{N: n, Home: home, State: ShardUnavailable}
	}
	for _, kv := range owners.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), shardPrefix)
		if s, ok := strings.CutSuffix(rest, "/leader"); ok {
			if n, err := strconv.Atoi(s); err == nil {
				if l, err := ParseLeader(kv.Value); err == nil {
					rs.Leaders[n] = l
				}
			}
			continue
		}
		rest, ok := strings.CutSuffix(rest, "/owner")
		n, err := strconv.Atoi(rest)
		if !ok || err != nil || n < 0 || n >= m.Shards || m.Grouped(n) {
			continue // a group's ownership key is a switch's leftover
		}
		var v holderValue
		_ = json.Unmarshal(kv.Value, &v)
		st.Shards[n].Owner, st.Shards[n].Epoch, st.Shards[n].State = v.Node, kv.CreateRevision, ShardOwned
	}
	for n := range st.Shards {
		if m.Grouped(n) {
			replicatedShard(&st.Shards[n], m, rs, node)
		} else if m.Growing(n) {
			st.Shards[n].UnderReplicated = true // owned, until its home makes it a group
		}
	}
	for _, n := range byID {
		st.Nodes = append(st.Nodes, *n)
	}
	slices.SortFunc(st.Nodes, func(a, b NodeStatus) int { return strings.Compare(a.ID, b.ID) })
	return st, nil
}

// replicatedShard fills a replicated shard's status: its leader as the
// owner, with the term as the epoch, and its replicas, each of whose
// nodes holds it.
func replicatedShard(s *ShardStatus, m Map, rs ReplicaState, node func(string) *NodeStatus) {
	if l, ok := rs.Leaders[s.N]; ok {
		s.Owner, s.Epoch, s.State = l.Node, int64(l.Term), ShardOwned
	}
	s.Replicas, s.UnderReplicated = rs.Replicas(m, s.N)
	for _, r := range s.Replicas {
		node(r.Node).Shards = append(node(r.Node).Shards, s.N)
	}
}

// readProgress reads every node's progress report, by node.
func readProgress(ctx context.Context, c *clientv3.Client, k Keys, opts ...clientv3.OpOption) (map[string]ProgressReport, error) {
	resp, err := c.Get(ctx, k.Progress(""), append([]clientv3.OpOption{clientv3.WithPrefix()}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("read progress reports: %w", err)
	}
	out := make(map[string]ProgressReport, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if r, err := ParseProgress(kv.Value); err == nil {
			out[r.Node] = r
		}
	}
	return out, nil
}
