package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Map is the cluster's shard map (spec §11): which node holds each shard's
// data. Only that node ever takes the shard's ownership, so a shard is never
// handed to a node without its data; a move changes Homes and the owner in
// one transaction.
type Map struct {
	Shards int      `json:"shards"`
	Homes  []string `json:"homes"` // Homes[n]: the node that holds shard n
	// Nodes are the nodes the cluster was created with, in the order
	// given: what a repeated creation is compared with, since moves change
	// Homes.
	Nodes []string `json:"nodes,omitempty"`
	// Replicas is the number of replicas each shard is to have (0 or 1:
	// one, spec §11). Sets[n], when not empty, makes shard n a Raft group
	// (spec §15) of those replicas, the first staying one on Homes[n];
	// an empty set leaves shard n owned by its home, which makes it a
	// group once Replicas asks for more (grow.go). Without any group and
	// with one replica asked for, Sets is absent.
	Replicas int         `json:"replicas,omitempty"`
	Sets     [][]Replica `json:"sets,omitempty"`
}

// ShardMap is the key of the map: one key, so that a move can compare and
// swap it whole (etcd allows 128 operations per transaction by default,
// fewer than the shards a cluster may have).
func (k Keys) ShardMap() string { return "/" + k.Name + "/shards/map" }

// ErrNoCluster: the cluster has not been created in etcd yet.
var ErrNoCluster = errors.New("cluster not created")

// ErrClusterNodes refuses to create a cluster again with other nodes than
// it was created with: the shards are spread already.
var ErrClusterNodes = errors.New("the cluster was created with other nodes")

// ClusterNodesError is returned (wrapping ErrClusterNodes) with both lists.
type ClusterNodesError struct{ Recorded, Asked []string }

func (e *ClusterNodesError) Error() string {
	return fmt.Sprintf("the cluster was created with nodes %s, not %s",
		strings.Join(e.Recorded, ","), strings.Join(e.Asked, ","))
}

func (e *ClusterNodesError) Unwrap() error { return ErrClusterNodes }

// CreateCluster records the number of shards and the shard map in one
// transaction: a shard that a node reports it holds (ReportHeld) has that
// node for home, the others are spread round robin over nodes in the order
// given. Creating it again with the same arguments changes nothing; with
// another number of shards it is refused with a *ShardCountError, with
// other nodes with a *ClusterNodesError, and while two nodes hold one
// shard with a *ShardHeldTwiceError.
func CreateCluster(ctx context.Context, c *clientv3.Client, k Keys, shards int, nodes []string) error {
	_, _, err := EnsureCluster(ctx, c, k, shards, nodes)
	return err
}

// EnsureCluster is CreateCluster that also answers the map in etcd and
// whether this call created it.
func EnsureCluster(ctx context.Context, c *clientv3.Client, k Keys, shards int, nodes []string) (Map, bool, error) {
	return EnsureReplicated(ctx, c, k, shards, 1, nodes)
}

// EnsureReplicated is EnsureCluster with replicas replicas per shard (1,
// 3 or 5, at most one per node): each shard's set is placed round robin
// from its home, with Raft IDs taken from the counter ReplicaIDs in the
// map's own transaction. Replicas start empty: a node holding a shard
// folder refuses it (ErrReplicatedHeld). Another replica count than the
// cluster's is a *ReplicaCountError.
func EnsureReplicated(ctx context.Context, c *clientv3.Client, k Keys, shards, replicas int, nodes []string) (Map, bool, error) {
	if shards < 1 {
		return Map{}, false, fmt.Errorf("create cluster: %d shards", shards)
	}
	if len(nodes) == 0 || slices.Contains(nodes, "") {
		return Map{}, false, fmt.Errorf("create cluster: nodes %q", nodes)
	}
	for i, n := range nodes {
		if slices.Contains(nodes[:i], n) {
			return Map{}, false, fmt.Errorf("create cluster: node %q named twice", n)
		}
	}
	if err := CheckReplicas(replicas, len(nodes)); err != nil {
		return Map{}, false, fmt.Errorf("create cluster: %w", err)
	}
	count, mapKey := k.ShardCount(), k.ShardMap()
	// The shard count may have been recorded alone (RecordShards), so the
	// map's absence is what says the cluster is not created; the count,
	// when there, must agree. A race with another creation, or a node
	// reporting meanwhile, is answered by reading again.
	for range 5 {
		if m, err := readMap(ctx, c, k); err == nil {
			return m, false, sameCluster(m, shards, replicas, nodes)
		} else if !errors.Is(err, ErrNoCluster) {
			return Map{}, false, fmt.Errorf("create cluster: %w", err)
		}
		reports, err := readHeld(ctx, c, k)
		if err != nil {
			return Map{}, false, fmt.Errorf("create cluster: %w", err)
		}
		homes, err := homesFrom(reports.byNode, shards, nodes)
		if err != nil {
			return Map{}, false, fmt.Errorf("create cluster: %w", err)
		}
		m := Map{Shards: shards, Homes: homes, Nodes: slices.Clone(nodes)}
		// The replica IDs are taken in the map's transaction: compared
		// unchanged, advanced past the IDs the sets use.
		cmps := []clientv3.Cmp{reports.unchanged(k)}
		var ops []clientv3.Op
		if replicas > 1 {
			ids, err := c.Get(ctx, k.ReplicaIDs())
			if err != nil {
				return Map{}, false, fmt.Errorf("create cluster: %w", err)
			}
			if err := replicasFrom(&m, reports.byNode, replicas, ids, k, &cmps, &ops); err != nil {
				return Map{}, false, fmt.Errorf("create cluster: %w", err)
			}
		}
		v, err := json.Marshal(m)
		if err != nil {
			return Map{}, false, fmt.Errorf("create cluster: %w", err)
		}
		resp, err := c.Txn(ctx).
			If(append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(mapKey), "=", 0),
				clientv3.Compare(clientv3.CreateRevision(count), "=", 0)}, cmps...)...).
			Then(append([]clientv3.Op{clientv3.OpPut(count, strconv.Itoa(shards)), clientv3.OpPut(mapKey, string(v))}, ops...)...).
			Else(clientv3.OpGet(count), clientv3.OpGet(mapKey)).
			Commit()
		if err != nil {
			return Map{}, false, fmt.Errorf("create cluster: %w", err)
		}
		if resp.Succeeded {
			return m, true, nil
		}
		countKVs := resp.Responses[0].GetResponseRange().GetKvs()
		mapKVs := resp.Responses[1].GetResponseRange().GetKvs()
		if len(mapKVs) > 0 || len(countKVs) == 0 {
			continue // created meanwhile, or a report changed: read again
		}
		recorded, err := strconv.Atoi(string(countKVs[0].Value))
		if err != nil || recorded < 1 {
			return Map{}, false, fmt.Errorf("create cluster: %s holds %q, not a number of shards", count, countKVs[0].Value)
		}
		if recorded != shards {
			return Map{}, false, &ShardCountError{Recorded: recorded, Asked: shards}
		}
		resp, err = c.Txn(ctx).
			If(append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(mapKey), "=", 0),
				clientv3.Compare(clientv3.Value(count), "=", strconv.Itoa(shards))}, cmps...)...).
			Then(append([]clientv3.Op{clientv3.OpPut(mapKey, string(v))}, ops...)...).
			Commit()
		if err != nil {
			return Map{}, false, fmt.Errorf("create cluster: %w", err)
		}
		if resp.Succeeded {
			return m, true, nil
		}
	}
	return Map{}, false, fmt.Errorf("create cluster: %s, %s and the nodes' reports keep changing", count, mapKey)
}

// sameCluster checks a repeated creation against the map in etcd.
func sameCluster(have Map, shards, replicas int, nodes []string) error {
	if have.Shards != shards {
		return &ShardCountError{Recorded: have.Shards, Asked: shards}
	}
	if have.ReplicaCount() != replicas {
		return &ReplicaCountError{Recorded: have.ReplicaCount(), Asked: replicas}
	}
	recorded := have.Nodes
	if len(recorded) == 0 {
		// A map written without its node list: the homes, in order of
		// first appearance, are the nodes it was spread over.
		for _, h := range have.Homes {
			if !slices.Contains(recorded, h) {
				recorded = append(recorded, h)
			}
		}
	}
	if !slices.Equal(recorded, nodes) {
		return &ClusterNodesError{Recorded: recorded, Asked: slices.Clone(nodes)}
	}
	return nil
}

// ReadMap reads the shard map (ErrNoCluster before CreateCluster).
func ReadMap(ctx context.Context, c *clientv3.Client, k Keys) (Map, error) {
	return readMap(ctx, c, k)
}

func readMap(ctx context.Context, c *clientv3.Client, k Keys, opts ...clientv3.OpOption) (Map, error) {
	resp, err := c.Get(ctx, k.ShardMap(), opts...)
	if err != nil {
		return Map{}, fmt.Errorf("read shard map: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return Map{}, ErrNoCluster
	}
	var m Map
	if err := json.Unmarshal(resp.Kvs[0].Value, &m); err != nil || m.Shards < 1 || len(m.Homes) != m.Shards || !m.validReplicas() {
		return Map{}, fmt.Errorf("read shard map: %s is not a shard map: %q", k.ShardMap(), resp.Kvs[0].Value)
	}
	return m, nil
}

// HeldBy lists the shards whose data node holds, in order: those it is
// home of, or, replicated, those it has a replica of.
func (m Map) HeldBy(node string) []int {
	var out []int
	for n, home := range m.Homes {
		if _, ok := m.ReplicaOn(n, node); home == node || ok {
			out = append(out, n)
		}
	}
	return out
}

// OwnedBy lists the shards whose ownership node keeps (spec §11): those
// it is home of, but for the Raft groups, whose leaders serve them
// instead (docs/replication-design.md §9).
func (m Map) OwnedBy(node string) []int {
	var out []int
	for _, n := range m.HeldBy(node) {
		if !m.Grouped(n) {
			out = append(out, n)
		}
	}
	return out
}

// WaitMap reads the shard map, waiting for the cluster's creation while
// there is none (onWait is called once then): a node starts, reports what
// it holds, and waits for `cluster create`, which waits for the reports.
func WaitMap(ctx context.Context, c *clientv3.Client, k Keys, onWait func()) (Map, error) {
	waited := false
	for {
		get, err := c.Get(ctx, k.ShardMap())
		if err != nil {
			return Map{}, fmt.Errorf("read shard map: %w", err)
		}
		if len(get.Kvs) > 0 {
			return readMap(ctx, c, k, clientv3.WithRev(get.Header.Revision))
		}
		if !waited && onWait != nil {
			onWait()
		}
		waited = true
		if err := waitPut(ctx, c, k.ShardMap(), get.Header.Revision+1); err != nil {
			return Map{}, err
		}
	}
}

// WaitReplicated waits until the shard map is replicated (Replicated:
// created so, or asked for replicas by set-replicas) and returns it.
func WaitReplicated(ctx context.Context, c *clientv3.Client, k Keys) (Map, error) {
	for {
		get, err := c.Get(ctx, k.ShardMap())
		if err != nil {
			return Map{}, fmt.Errorf("read shard map: %w", err)
		}
		if len(get.Kvs) > 0 {
			m, err := readMap(ctx, c, k, clientv3.WithRev(get.Header.Revision))
			if err != nil || m.Replicated() {
				return m, err
			}
		}
		if err := waitPut(ctx, c, k.ShardMap(), get.Header.Revision+1); err != nil {
			return Map{}, err
		}
	}
}

// waitPut returns once key (a prefix, with clientv3.WithPrefix) is written
// at or after revision rev.
func waitPut(ctx context.Context, c *clientv3.Client, key string, rev int64, opts ...clientv3.OpOption) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for resp := range c.Watch(wctx, key, append([]clientv3.OpOption{clientv3.WithRev(rev)}, opts...)...) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watch %s: %w", key, err)
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypePut {
				return nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("watch %s: closed", key)
}
