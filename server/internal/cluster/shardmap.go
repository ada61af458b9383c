package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Map is the cluster's shard map (spec §11): which node holds each shard's
// data. Only that node ever takes the shard's ownership, so a shard is never
// handed to a node without its data; a move changes Homes and the owner in
// one transaction.
type Map struct {
	Shards int      `json:"shards"`
	Homes  []string `json:"homes"` // Homes[n]: the node that holds shard n
}

// ShardMap is the key of the map: one key, so that a move can compare and
// swap it whole (etcd allows 128 operations per transaction by default,
// fewer than the shards a cluster may have).
func (k Keys) ShardMap() string { return "/" + k.Name + "/shards/map" }

// ErrNoCluster: the cluster has not been created in etcd yet.
var ErrNoCluster = errors.New("cluster not created")

// CreateCluster records the number of shards and spreads the shards over
// nodes, round robin in the order given, in one transaction. When the
// cluster exists already it changes nothing and checks the number of
// shards (a *ShardCountError when another).
func CreateCluster(ctx context.Context, c *clientv3.Client, k Keys, shards int, nodes []string) error {
	if shards < 1 {
		return fmt.Errorf("create cluster: %d shards", shards)
	}
	if len(nodes) == 0 || slices.Contains(nodes, "") {
		return fmt.Errorf("create cluster: nodes %q", nodes)
	}
	m := Map{Shards: shards, Homes: make([]string, shards)}
	for n := range m.Homes {
		m.Homes[n] = nodes[n%len(nodes)]
	}
	v, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("create cluster: %w", err)
	}
	count := k.ShardCount()
	resp, err := c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(count), "=", 0)).
		Then(clientv3.OpPut(count, strconv.Itoa(shards)), clientv3.OpPut(k.ShardMap(), string(v))).
		Commit()
	if err != nil {
		return fmt.Errorf("create cluster: %w", err)
	}
	if resp.Succeeded {
		return nil
	}
	return RecordShards(ctx, c, k, shards)
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
	if err := json.Unmarshal(resp.Kvs[0].Value, &m); err != nil || m.Shards < 1 || len(m.Homes) != m.Shards {
		return Map{}, fmt.Errorf("read shard map: %s is not a shard map: %q", k.ShardMap(), resp.Kvs[0].Value)
	}
	return m, nil
}

// HeldBy lists the shards whose data node holds, in order.
func (m Map) HeldBy(node string) []int {
	var out []int
	for n, home := range m.Homes {
		if home == node {
			out = append(out, n)
		}
	}
	return out
}
