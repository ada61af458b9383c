// Package router makes a cluster node answer any request (spec §11): it
// serves the threads of the shards it owns from their stores, forwards the
// rest to their owners with the epoch it believes, merges every shard's
// page of a listing, and fans the retention admin routes out to every
// shard. What it knows of the cluster comes from etcd (View).
package router

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
)

// state is what a node knows of the cluster at one etcd revision.
type state struct {
	rev    int64
	m      cluster.Map
	owners map[int]owner     // absent: no owner
	nodes  map[string]string // the running nodes' advertise URLs, by ID
	// leaders are the replicated shards' leader records (advisory).
	leaders map[int]cluster.Leader
	// progress are the nodes' reports of their replicas, by node.
	progress map[string]cluster.ProgressReport
}

// owner is a shard's owner as its ownership key says: the node, where it
// is reached, and the epoch (the key's creation revision).
type owner struct {
	Node  string `json:"node"`
	URL   string `json:"url"`
	epoch int64
}

// View keeps the shard map, each shard's epoch and the registered nodes,
// read from etcd and kept current by a watch.
type View struct {
	c   *clientv3.Client
	k   cluster.Keys
	log *slog.Logger
	mu  sync.RWMutex
	st  state
}

// NewView reads the cluster's state once (cluster.ErrNoCluster when it was
// not created) and keeps it current until ctx ends.
func NewView(ctx context.Context, c *clientv3.Client, k cluster.Keys, log *slog.Logger) (*View, error) {
	if log == nil {
		log = slog.Default()
	}
	v := &View{c: c, k: k, log: log}
	if err := v.Refresh(ctx); err != nil {
		return nil, err
	}
	go v.watch(ctx)
	return v, nil
}

func (v *View) prefix() string { return "/" + v.k.Name + "/" }

// Refresh reads the state from etcd now (a linearizable read): after a 421
// the node retries with what etcd says, not what its watch has delivered.
func (v *View) Refresh(ctx context.Context) error {
	resp, err := v.c.Get(ctx, v.prefix(), clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("read cluster state: %w", err)
	}
	st := state{rev: resp.Header.Revision, owners: map[int]owner{}, nodes: map[string]string{}, leaders: map[int]cluster.Leader{},
		progress: map[string]cluster.ProgressReport{}}
	var haveMap bool
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), v.prefix())
		switch {
		case rest == "shards/map":
			if err := json.Unmarshal(kv.Value, &st.m); err != nil || st.m.Shards < 1 || len(st.m.Homes) != st.m.Shards {
				return fmt.Errorf("read cluster state: %s is not a shard map: %q", kv.Key, kv.Value)
			}
			haveMap = true
		case strings.HasPrefix(rest, "nodes/"):
			var n struct {
				URL string `json:"url"`
			}
			if json.Unmarshal(kv.Value, &n) == nil && n.URL != "" {
				st.nodes[strings.TrimPrefix(rest, "nodes/")] = n.URL
			}
		case strings.HasPrefix(rest, "shards/") && strings.HasSuffix(rest, "/owner"):
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rest, "shards/"), "/owner"))
			var o owner
			if err == nil && json.Unmarshal(kv.Value, &o) == nil {
				o.epoch = kv.CreateRevision
				st.owners[n] = o
			}
		case strings.HasPrefix(rest, "progress/"):
			if r, err := cluster.ParseProgress(kv.Value); err == nil {
				st.progress[r.Node] = r
			}
		case strings.HasPrefix(rest, "shards/") && strings.HasSuffix(rest, "/leader"):
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rest, "shards/"), "/leader"))
			if l, perr := cluster.ParseLeader(kv.Value); err == nil && perr == nil {
				st.leaders[n] = l
			}
		}
	}
	if !haveMap {
		return cluster.ErrNoCluster
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if st.rev >= v.st.rev {
		v.st = st
	}
	return nil
}

// watch refreshes the view whenever a key of the cluster changes.
func (v *View) watch(ctx context.Context) {
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		ch := v.c.Watch(wctx, v.prefix(), clientv3.WithPrefix(), clientv3.WithRev(v.state().rev+1))
		for resp := range ch {
			if err := resp.Err(); err != nil {
				v.log.Warn("cluster_watch_failed", "err", err)
				break
			}
			if v.progressOnly(resp.Events) {
				continue
			}
			if err := v.Refresh(ctx); err != nil && ctx.Err() == nil {
				v.log.Warn("cluster_state_unreadable", "err", err)
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
			// Catch up with what the broken watch missed.
			if err := v.Refresh(ctx); err != nil && ctx.Err() == nil {
				v.log.Warn("cluster_state_unreadable", "err", err)
			}
		}
	}
}

func (v *View) state() state {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.st
}

// NodeURL is the advertise URL of running node id, as registered.
func (v *View) NodeURL(id string) (string, bool) {
	u, ok := v.state().nodes[id]
	return u, ok
}

// ReplicaNode names the node the shard map puts replica id on: the map
// as it is now, since replicas are added and removed while nodes run.
func (v *View) ReplicaNode(id uint64) (string, bool) { return v.state().m.ReplicaNode(id) }

// Leader is the leader record of replicated shard n: the node whose
// replica leads its group, and in which term. Advisory: the record may
// lag an election, so a request sent by it may be forwarded or refused.
func (v *View) Leader(n int) (cluster.Leader, bool) {
	l, ok := v.state().leaders[n]
	return l, ok
}

// Shards is the cluster's number of shards.
func (v *View) Shards() int { return v.state().m.Shards }

// Unowned is the number of shards no node owns in this node's view: their
// requests answer 503 until their home node takes them again. A
// replicated shard counts while no leader record names its leader.
func (v *View) Unowned() int {
	st := v.state()
	n := 0
	for i := range st.m.Shards {
		_, owned := st.owners[i]
		if st.m.Grouped(i) {
			_, owned = st.leaders[i]
		}
		if !owned {
			n++
		}
	}
	return n
}
