package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Membership of replicated shards (docs/replication-design.md §8): the
// shard map's sets are the desired membership, changed here by
// compare-and-swap; each group's leader moves its group towards its set
// (Reconciler). A replica replaced is marked Leaving and stays in the
// set until its group removed it; the one replacing it is Added, with a
// new Raft ID from the counter, in the same transaction.

// ErrMembershipChange refuses a change of a replica set that cannot be
// made: the shard is not replicated, the node named holds no replica of
// it or holds one already, a change of the shard is still under way.
var ErrMembershipChange = errors.New("replica set change refused")

// ErrMoveCancelled: a move's new replica lost its node before it became
// a voter, and the move was cancelled (CancelAdded).
var ErrMoveCancelled = errors.New("the move was cancelled")

// maxMapRetries bounds the compare-and-swap retries of a map change
// racing others.
const maxMapRetries = 10

// changeMap applies change to the shard map and writes it back if
// neither the map nor the replica ID counter changed meanwhile, reading
// both again and retrying otherwise. change gets a copy it may edit and
// newID, which hands out Raft IDs from the counter; changed false writes
// nothing.
func changeMap(ctx context.Context, c *clientv3.Client, k Keys,
	change func(m *Map, newID func() uint64) (changed bool, err error)) (Map, error) {
	m, _, err := changeMapIf(ctx, c, k, nil, nil, change)
	return m, err
}

// errMapCmp: a change's own comparisons failed while the map stood.
var errMapCmp = errors.New("the change's condition no longer holds")

// errOutcomeUnknown: the change's transaction failed in etcd's client,
// which may have committed it.
var errOutcomeUnknown = errors.New("the change may or may not have been made")

// changeMapIf is changeMap whose transaction also checks cmps and
// applies ops; it returns the revision it committed at. A failure of
// cmps (the map unchanged) is errMapCmp, not retried.
func changeMapIf(ctx context.Context, c *clientv3.Client, k Keys, cmps []clientv3.Cmp, ops []clientv3.Op,
	change func(m *Map, newID func() uint64) (changed bool, err error)) (Map, int64, error) {
	for range maxMapRetries {
		resp, err := c.Txn(ctx).Then(clientv3.OpGet(k.ShardMap()), clientv3.OpGet(k.ReplicaIDs())).Commit()
		if err != nil {
			return Map{}, 0, err
		}
		mkvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(mkvs) == 0 {
			return Map{}, 0, ErrNoCluster
		}
		var m Map
		if err := json.Unmarshal(mkvs[0].Value, &m); err != nil || !m.validReplicas() {
			return Map{}, 0, fmt.Errorf("%s is not a shard map: %q", k.ShardMap(), mkvs[0].Value)
		}
		first, idCmp, err := replicaIDs((*clientv3.GetResponse)(resp.Responses[1].GetResponseRange()), k)
		if err != nil {
			return Map{}, 0, err
		}
		next := first
		changed, err := change(&m, func() uint64 { next++; return next - 1 })
		if err != nil || !changed {
			return m, 0, err
		}
		for n := range m.Sets {
			if m.Grouped(n) {
				m.Homes[n] = m.Desired(n)[0].Node
			}
		}
		if !m.Replicated() {
			m.Sets = nil // one copy each again, and no group
		}
		if !m.validReplicas() {
			return Map{}, 0, fmt.Errorf("%w: the change leaves an invalid map", ErrMembershipChange)
		}
		v, err := json.Marshal(m)
		if err != nil {
			return Map{}, 0, err
		}
		put := []clientv3.Op{clientv3.OpPut(k.ShardMap(), string(v))}
		if next != first {
			put = append(put, clientv3.OpPut(k.ReplicaIDs(), strconv.FormatUint(next, 10)))
		}
		mapCmp := clientv3.Compare(clientv3.ModRevision(k.ShardMap()), "=", mkvs[0].ModRevision)
		tr, err := c.Txn(ctx).If(append([]clientv3.Cmp{mapCmp, idCmp}, cmps...)...).
			Then(append(put, ops...)...).Else(clientv3.OpTxn([]clientv3.Cmp{mapCmp, idCmp}, nil, nil)).Commit()
		if err != nil {
			return Map{}, 0, fmt.Errorf("%w: %w", errOutcomeUnknown, err)
		}
		if tr.Succeeded {
			return m, tr.Header.Revision, nil
		}
		if tr.Responses[0].GetResponseTxn().GetSucceeded() {
			return Map{}, 0, fmt.Errorf("%w: %w", ErrMembershipChange, errMapCmp)
		}
	}
	return Map{}, 0, fmt.Errorf("%w: the shard map kept changing", ErrMembershipChange)
}

// checkShard checks that m's shard n is replicated and has no change
// under way (a Leaving replica): one change of a shard at a time.
func checkShard(m *Map, n int) error {
	switch {
	case n < 0 || n >= m.Shards:
		return fmt.Errorf("%w: the cluster has shards 0 to %d", ErrMembershipChange, m.Shards-1)
	case !m.Grouped(n):
		return fmt.Errorf("%w: shard %d has one replica", ErrMembershipChange, n)
	case len(m.Desired(n)) != len(m.Sets[n]):
		return fmt.Errorf("shard %d: %w", n, ErrMoveInProgress)
	}
	return nil
}

// replace marks shard n's replica on node from Leaving and adds one on
// node to with a new ID.
func replace(m *Map, n int, from, to string, newID func() uint64) error {
	i := slices.IndexFunc(m.Sets[n], func(r Replica) bool { return r.Node == from && !r.Leaving })
	if i < 0 {
		return fmt.Errorf("%w: node %s holds no replica of shard %d", ErrMembershipChange, from, n)
	}
	if _, ok := m.ReplicaOn(n, to); ok {
		return fmt.Errorf("%w: node %s holds a replica of shard %d already", ErrMembershipChange, to, n)
	}
	m.Sets[n][i].Leaving = true
	m.Sets[n] = append(m.Sets[n], Replica{ID: newID(), Node: to, Added: true})
	return nil
}

// MoveReplica moves shard n's replica from node from to node to, which
// must be registered (running): to's replica is added to the set, from's
// marked leaving, and the group's leader adds, catches up and promotes
// the new one and then removes the old (Reconciler).
func MoveReplica(ctx context.Context, c *clientv3.Client, k Keys, n int, from, to string) (Map, error) {
	if r, err := c.Get(ctx, k.Node(to), clientv3.WithCountOnly()); err != nil {
		return Map{}, fmt.Errorf("move shard %d: %w", n, err)
	} else if r.Count == 0 {
		return Map{}, fmt.Errorf("move shard %d: node %s: %w", n, to, ErrNodeDown)
	}
	m, err := changeMap(ctx, c, k, func(m *Map, newID func() uint64) (bool, error) {
		if err := checkShard(m, n); err != nil {
			return false, err
		}
		return true, replace(m, n, from, to, newID)
	})
	if err != nil {
		return Map{}, fmt.Errorf("move shard %d: %w", n, err)
	}
	return m, nil
}

// SetReplicas changes the replica count of every shard to r (1, 3 or
// 5) over the nodes live (registered). Each Raft group gets new replicas
// on the live nodes holding fewest replicas, or has its last ones marked
// leaving (down to a group of one: its leader stays the only voter). A
// shard still owned by its home (spec §11) is left to it: once r asks
// for more than one replica its home makes it a group (GrowShard), and
// with one asked for it stays owned.
func SetReplicas(ctx context.Context, c *clientv3.Client, k Keys, r int, live []string) (Map, error) {
	m, err := changeMap(ctx, c, k, func(m *Map, newID func() uint64) (bool, error) {
		if err := CheckReplicas(r, len(live)); err != nil {
			return false, err
		}
		if r == m.ReplicaCount() {
			return false, nil
		}
		for n := range m.Sets {
			if m.Grouped(n) {
				if err := checkShard(m, n); err != nil {
					return false, err
				}
			}
		}
		if m.Sets == nil {
			m.Sets = make([][]Replica, m.Shards)
		}
		for n := range m.Sets {
			if !m.Grouped(n) {
				continue
			}
			for len(m.Sets[n]) < r {
				to, ok := placeOne(m, n, live)
				if !ok {
					return false, fmt.Errorf("%w: no live node without a replica of shard %d", ErrReplicaCount, n)
				}
				m.Sets[n] = append(m.Sets[n], Replica{ID: newID(), Node: to, Added: true})
			}
			for i := len(m.Sets[n]) - 1; i >= r; i-- {
				m.Sets[n][i].Leaving = true
			}
		}
		m.Replicas = r
		return true, nil
	})
	if err != nil {
		return Map{}, fmt.Errorf("set replicas to %d: %w", r, err)
	}
	return m, nil
}

// ReplaceReplica replaces shard n's replica on node dead (down longer
// than DEAD_AFTER) by one on a live node holding no replica of the
// shard, the one holding fewest replicas; false when there is none (the
// shard stays under-replicated) or the set changed already.
func ReplaceReplica(ctx context.Context, c *clientv3.Client, k Keys, n int, dead string, live []string) (Map, bool, error) {
	replaced := false
	m, err := changeMap(ctx, c, k, func(m *Map, newID func() uint64) (bool, error) {
		replaced = false
		if checkShard(m, n) != nil {
			return false, nil // a change is under way: the next look decides
		}
		if r, ok := m.ReplicaOn(n, dead); !ok || r.Leaving {
			return false, nil
		}
		to, ok := placeOne(m, n, live)
		if !ok {
			return false, nil
		}
		replaced = true
		return true, replace(m, n, dead, to, newID)
	})
	if err != nil {
		return Map{}, false, fmt.Errorf("replace shard %d's replica on %s: %w", n, dead, err)
	}
	return m, replaced, nil
}

// CancelAdded cancels the change that added shard n's replica id (a
// move, a replacement) when its node died before the replica became a
// voter: id is marked leaving, and a leaving replica that voters (the
// group's applied voters) still holds stays instead, so that the shard
// keeps the replicas it had. False when id is no staying added replica
// or no leaving one is a voter (nothing to fall back on).
func CancelAdded(ctx context.Context, c *clientv3.Client, k Keys, n int, id uint64, voters []uint64) (Map, bool, error) {
	cancelled := false
	m, err := changeMap(ctx, c, k, func(m *Map, _ func() uint64) (bool, error) {
		cancelled = false
		if n < 0 || n >= len(m.Sets) {
			return false, nil
		}
		set := m.Sets[n]
		i := slices.IndexFunc(set, func(r Replica) bool { return r.ID == id && r.Added && !r.Leaving })
		j := slices.IndexFunc(set, func(r Replica) bool { return r.Leaving && slices.Contains(voters, r.ID) })
		if i < 0 || j < 0 {
			return false, nil
		}
		set[i].Leaving, set[j].Leaving = true, false
		cancelled = true
		return true, nil
	})
	if err != nil {
		return Map{}, false, fmt.Errorf("cancel shard %d's replica %d: %w", n, id, err)
	}
	return m, cancelled, nil
}

// DropRemoved takes shard n's replica id out of its set once its group
// removed it: only a Leaving one.
func DropRemoved(ctx context.Context, c *clientv3.Client, k Keys, n int, id uint64) error {
	_, err := changeMap(ctx, c, k, func(m *Map, _ func() uint64) (bool, error) {
		if n < 0 || n >= len(m.Sets) {
			return false, nil
		}
		i := slices.IndexFunc(m.Sets[n], func(r Replica) bool { return r.ID == id && r.Leaving })
		if i < 0 {
			return false, nil
		}
		m.Sets[n] = slices.Delete(m.Sets[n], i, i+1)
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("drop shard %d's replica %d: %w", n, id, err)
	}
	// The ID is never used again: its start mark goes (one left behind
	// by a failed delete only costs a key).
	if _, err := c.Delete(ctx, k.ReplicaStarted(id)); err != nil {
		return fmt.Errorf("drop shard %d's replica %d: %w", n, id, err)
	}
	return nil
}

// placeOne picks, for a new replica of shard n, the live node holding
// no replica of it (a leaving one included: one folder per shard and
// node) with the fewest replicas of any shard, the first in name order
// among equals.
func placeOne(m *Map, n int, live []string) (string, bool) {
	load := map[string]int{}
	for _, set := range m.Sets {
		for _, r := range set {
			load[r.Node]++
		}
	}
	var best []string
	for _, node := range live {
		if _, ok := m.ReplicaOn(n, node); !ok && !slices.Contains(best, node) {
			best = append(best, node)
		}
	}
	if len(best) == 0 {
		return "", false
	}
	slices.SortFunc(best, func(a, b string) int { return cmp.Or(cmp.Compare(load[a], load[b]), cmp.Compare(a, b)) })
	return best[0], true
}

// WaitSettled waits until shard n's set has no leaving replica: its
// group's leader removed the replicas the last change replaced.
func WaitSettled(ctx context.Context, c *clientv3.Client, k Keys, n int) (Map, error) {
	for {
		resp, err := c.Get(ctx, k.ShardMap())
		if err != nil {
			return Map{}, err
		}
		if len(resp.Kvs) == 0 {
			return Map{}, ErrNoCluster
		}
		var m Map
		if err := json.Unmarshal(resp.Kvs[0].Value, &m); err != nil || n < 0 || n >= len(m.Sets) {
			return Map{}, fmt.Errorf("%s is not a replicated shard map with shard %d", k.ShardMap(), n)
		}
		if len(m.Desired(n)) == len(m.Sets[n]) {
			return m, nil
		}
		if err := waitPut(ctx, c, k.ShardMap(), resp.Header.Revision+1); err != nil {
			return Map{}, err
		}
	}
}

// LiveNodes lists the registered (running) nodes.
func LiveNodes(ctx context.Context, c *clientv3.Client, k Keys) ([]string, error) {
	prefix := k.Node("")
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	live := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		live = append(live, strings.TrimPrefix(string(kv.Key), prefix))
	}
	return live, nil
}
