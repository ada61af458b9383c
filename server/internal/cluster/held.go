package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// Held is what a node reports it holds on disk (spec §10.1): the shard
// databases in its <DB_PATH>/shards/, whatever the shard map says. It is
// how `cluster create` rebuilds the map after etcd's data is lost, and how
// a node learns that a shard it is named home of lives elsewhere.
type Held struct {
	Node       string      `json:"node"`
	Shards     []HeldShard `json:"shards"`
	ReportedAt time.Time   `json:"reported_at"`
}

// HeldShard is one shard database on a node's disk.
type HeldShard struct {
	Shard      int    `json:"shard"`
	DatabaseID string `json:"database_id,omitempty"` // "" when not read
	// UnfinishedRestore: the folder holds a restore that did not finish.
	UnfinishedRestore bool `json:"unfinished_restore,omitempty"`
}

// Holds reports whether h lists shard n.
func (h Held) Holds(n int) (HeldShard, bool) {
	for _, s := range h.Shards {
		if s.Shard == n {
			return s, true
		}
	}
	return HeldShard{}, false
}

// HeldKey holds node id's report. It has no lease: it says what the node's
// disk held when it last reported, also while the node is down.
func (k Keys) HeldKey(id string) string { return "/" + k.Name + "/held/" + id }

// ShardFolders lists the shards whose folder under <dbPath>/shards/ is
// not empty, in order: the databases this node holds on disk. Other names
// there (a move's staging) are not shards.
func ShardFolders(dbPath string) ([]int, error) {
	entries, err := os.ReadDir(filepath.Join(dbPath, "shards"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list shard folders: %w", err)
	}
	var ns []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n < 0 || strconv.Itoa(n) != e.Name() || !e.IsDir() {
			continue
		}
		inside, err := os.ReadDir(ShardDBPath(dbPath, n))
		if err != nil {
			return nil, fmt.Errorf("list shard folders: %w", err)
		}
		if len(inside) > 0 {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	return ns, nil
}

// DiskShards reads what <dbPath>/shards/ holds, opening each shard
// database in turn for its identity (a sealed one's is read from its
// folder's identity file): only while no store of this process
// has them open (a node's start).
func DiskShards(ctx context.Context, dbPath string) ([]HeldShard, error) {
	ns, err := ShardFolders(dbPath)
	if err != nil {
		return nil, err
	}
	out := make([]HeldShard, 0, len(ns))
	for _, n := range ns {
		st, err := store.Open(ShardDBPath(dbPath, n), store.Options{})
		if errors.Is(err, store.ErrRestoreUnfinished) {
			// A copy whose restore did not finish (a move's target that
			// died) is held all the same: no command serves it.
			rs, _, _ := store.ReadRestoreState(ShardDBPath(dbPath, n))
			out = append(out, HeldShard{Shard: n, DatabaseID: rs.DatabaseID, UnfinishedRestore: true})
			continue
		}
		if errors.Is(err, store.ErrSealedNeedsKEK) {
			// A sealed shard opens only with its key store, which the
			// node opens later: its folder names its identity.
			id, ferr := store.FolderDatabaseID(ShardDBPath(dbPath, n))
			if ferr == nil && id != "" {
				out = append(out, HeldShard{Shard: n, DatabaseID: id})
				continue
			}
		}
		if err != nil {
			return nil, fmt.Errorf("shard %d: %w", n, err)
		}
		id, err := st.DatabaseID(ctx, false)
		if cerr := st.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("shard %d: %w", n, err)
		}
		out = append(out, HeldShard{Shard: n, DatabaseID: id})
	}
	return out, nil
}

// ReportHeld records what node holds on disk, replacing its last report.
func ReportHeld(ctx context.Context, c *clientv3.Client, k Keys, node string, shards []HeldShard) error {
	h := Held{Node: node, Shards: slices.Clone(shards), ReportedAt: time.Now().UTC()}
	if h.Shards == nil {
		h.Shards = []HeldShard{}
	}
	slices.SortFunc(h.Shards, func(a, b HeldShard) int { return a.Shard - b.Shard })
	v, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("report held shards: %w", err)
	}
	if _, err := c.Put(ctx, k.HeldKey(node), string(v)); err != nil {
		return fmt.Errorf("report held shards: %w", err)
	}
	return nil
}

// heldReports are the reports in etcd by node, with each key's
// modification revision (for a transaction that depends on them).
type heldReports struct {
	byNode map[string]Held
	at     int64 // the revision they were read at
}

// unchanged holds while no report was written after r was read.
func (r heldReports) unchanged(k Keys) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(k.HeldKey("")), "<", r.at+1).WithPrefix()
}

// ReadHeld reads every node's report, by node ID.
func ReadHeld(ctx context.Context, c *clientv3.Client, k Keys) (map[string]Held, error) {
	r, err := readHeld(ctx, c, k)
	return r.byNode, err
}

func readHeld(ctx context.Context, c *clientv3.Client, k Keys) (heldReports, error) {
	resp, err := c.Get(ctx, k.HeldKey(""), clientv3.WithPrefix())
	if err != nil {
		return heldReports{}, fmt.Errorf("read held shards: %w", err)
	}
	r := heldReports{byNode: map[string]Held{}, at: resp.Header.Revision}
	for _, kv := range resp.Kvs {
		var h Held
		if err := json.Unmarshal(kv.Value, &h); err != nil || h.Node == "" || k.HeldKey(h.Node) != string(kv.Key) {
			return heldReports{}, fmt.Errorf("read held shards: %s is not a report: %q", kv.Key, kv.Value)
		}
		r.byNode[h.Node] = h
	}
	return r, nil
}

// HoldersOf lists the nodes whose reports hold shard n, in order.
func HoldersOf(reports map[string]Held, n int) []string {
	var out []string
	for id, h := range reports {
		if _, ok := h.Holds(n); ok {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// ErrShardHeldTwice refuses a shard map while two nodes hold databases of
// one shard: which one is the shard is the operator's call.
var ErrShardHeldTwice = errors.New("two nodes hold the same shard")

// ShardHeldTwiceError is returned (wrapping ErrShardHeldTwice) with the
// shard and its holders.
type ShardHeldTwiceError struct {
	Shard   int
	Holders []HeldBy
}

// HeldBy is one node holding a shard, with the database's identity.
type HeldBy struct {
	Node       string
	DatabaseID string
}

func (e *ShardHeldTwiceError) Error() string {
	parts := make([]string, len(e.Holders))
	for i, h := range e.Holders {
		parts[i] = h.Node
		if h.DatabaseID != "" {
			parts[i] += " (database_id " + h.DatabaseID + ")"
		}
	}
	return fmt.Sprintf("shard %d is held by %s: keep one, move the other folder <DB_PATH>/shards/%d away, restart that node and create again",
		e.Shard, strings.Join(parts, " and "), e.Shard)
}

func (e *ShardHeldTwiceError) Unwrap() error { return ErrShardHeldTwice }

// ErrShardBeyondCount refuses a shard map while a node holds a shard the
// asked number of shards does not have.
var ErrShardBeyondCount = errors.New("a node holds a shard beyond the shard count")

// homesFrom spreads the shards: a shard a node reports it holds has that
// node for home; the others go round robin over nodes, as on a cluster's
// first creation.
func homesFrom(reports map[string]Held, shards int, nodes []string) ([]string, error) {
	homes := make([]string, shards)
	for n := range homes {
		homes[n] = nodes[n%len(nodes)]
	}
	ids := make([]string, 0, len(reports))
	for id := range reports {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		for _, s := range reports[id].Shards {
			if s.Shard >= shards {
				return nil, fmt.Errorf("%w: node %s holds shard %d, and the cluster is created with %d shards",
					ErrShardBeyondCount, id, s.Shard, shards)
			}
		}
	}
	for n := range homes {
		holders := HoldersOf(reports, n)
		switch len(holders) {
		case 0:
		case 1:
			homes[n] = holders[0]
		default:
			e := &ShardHeldTwiceError{Shard: n}
			for _, id := range holders {
				s, _ := reports[id].Holds(n)
				e.Holders = append(e.Holders, HeldBy{Node: id, DatabaseID: s.DatabaseID})
			}
			return nil, e
		}
	}
	return homes, nil
}

// Unreported lists the nodes of nodes that have not reported what they
// hold: `cluster create` waits for them.
func Unreported(reports map[string]Held, nodes []string) []string {
	var out []string
	for _, id := range nodes {
		if _, ok := reports[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

// ErrShardElsewhere refuses to open an empty database for a shard the map
// names this node home of while another node holds a database for it: the
// map is wrong (created before that node reported), and writes here would
// split the shard.
var ErrShardElsewhere = errors.New("another node holds the shard")

// ShardElsewhereError is returned (wrapping ErrShardElsewhere) naming the
// shard and the node holding it.
type ShardElsewhereError struct {
	Shard      int
	Node       string // this node, named home by the map
	Holder     string
	DatabaseID string
}

func (e *ShardElsewhereError) Error() string {
	id := ""
	if e.DatabaseID != "" {
		id = " (database_id " + e.DatabaseID + ")"
	}
	return fmt.Sprintf("shard %d: the shard map names node %s its home, which holds no database for it, but node %s holds one%s: "+
		"not creating an empty one (docs/cluster.md, Recovering etcd)", e.Shard, e.Node, e.Holder, id)
}

func (e *ShardElsewhereError) Unwrap() error { return ErrShardElsewhere }

// CheckHomes is run by a node before it opens the shards m names it home
// of: a shard it holds no database for (onDisk) is created empty only
// while no other node reports holding it.
func CheckHomes(ctx context.Context, c *clientv3.Client, k Keys, m Map, node string, onDisk []int) error {
	var missing []int
	for _, n := range m.HeldBy(node) {
		// Every replica's node holds a group's shard: a new replica
		// starts empty and catches up from its group.
		if !m.Grouped(n) && !slices.Contains(onDisk, n) {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	reports, err := ReadHeld(ctx, c, k)
	if err != nil {
		return err
	}
	for _, n := range missing {
		for _, id := range HoldersOf(reports, n) {
			if id == node {
				continue
			}
			s, _ := reports[id].Holds(n)
			return &ShardElsewhereError{Shard: n, Node: node, Holder: id, DatabaseID: s.DatabaseID}
		}
	}
	return nil
}

// ErrUnreported: a node named for the cluster has not reported what it
// holds, so a map made now could name it home of a shard another node
// holds, or miss one it holds.
var ErrUnreported = errors.New("nodes have not reported the shards they hold")

// UnreportedError is returned (wrapping ErrUnreported) naming the nodes.
type UnreportedError struct{ Nodes []string }

func (e *UnreportedError) Error() string {
	return fmt.Sprintf("node %s has not reported the shards it holds (a node reports at start): start it", strings.Join(e.Nodes, ", "))
}

func (e *UnreportedError) Unwrap() error { return ErrUnreported }

// WaitReports waits, for at most wait, until every node of nodes has
// reported what it holds, calling onWait with the missing ones whenever
// they change; past wait it returns an *UnreportedError naming them.
func WaitReports(ctx context.Context, c *clientv3.Client, k Keys, nodes []string, wait time.Duration,
	onWait func(missing []string)) (map[string]Held, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var last []string
	for {
		r, err := readHeld(ctx, c, k)
		if err != nil {
			return nil, err
		}
		missing := Unreported(r.byNode, nodes)
		if len(missing) == 0 {
			return r.byNode, nil
		}
		if wctx.Err() != nil {
			return nil, &UnreportedError{Nodes: missing}
		}
		if !slices.Equal(missing, last) && onWait != nil {
			onWait(missing)
		}
		last = missing
		if err := waitPut(wctx, c, k.HeldKey(""), r.at+1, clientv3.WithPrefix()); err != nil && wctx.Err() == nil {
			return nil, err
		}
	}
}
