package replica_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/replica/replicatest"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// node is one process's host with a replica of each group.
type node struct {
	host *replica.Host
	reg  *prometheus.Registry // the host's metrics
}

// store is the node's store of group g: the one its host runs, which a
// snapshot may have replaced.
func (nd *node) store(g uint64) *store.Store { return nd.host.Store(g) }

// testCluster runs three nodes over one Local network; replica (g, i) has
// the Raft ID g*10+i+1.
type testCluster struct {
	replicatest.Nodes
	net    *replica.Local
	dir    string
	groups []uint64
	nodes  []*node
	onLead func(node int, l replica.Leadership) // nil: none
	// onLease, when set before the nodes start, is told their leases.
	onLease func(node int, l replica.LeaseChange)
	// logKeep is the hosts' Config.LogKeep (0: the default).
	logKeep int
	// logMaxBytes is the hosts' Config.LogMaxBytes (0: the default).
	logMaxBytes int64
	// blobs: each replica has a file:// folder of attachments
	// (blobsDir), which its store's blob effects write.
	blobs bool
	// joining are the nodes whose replicas join running groups
	// (GroupConfig.Join) rather than bootstrap them.
	joining map[int]bool
	// hook, when set before a node starts, is told by its folder where a
	// snapshot's install is: "adopt" (the unpacked state opened),
	// "close" (the old store closing), "reopen" (the swapped folder).
	hook func(node int, point string)
	// wrapEffects, when set before a node starts, wraps the effects of
	// each kind its stores apply.
	wrapEffects func(node int, kind store.EffectKind, fx store.Effects) store.Effects
	// sealed, when set before the nodes start, seals every store with a
	// key store of its own beside it, replicated (sealed_test.go).
	sealed *sealing
}

// folderOf is replica (g, i)'s Folder, telling c.hook.
func (c *testCluster) folderOf(i int, g uint64) *replica.Folder {
	dir, hook := c.folder(i, g), c.hook
	tell := func(point string) {
		if hook != nil {
			hook(i, point)
		}
	}
	var blobs string
	if c.blobs {
		blobs = c.blobsDir(i, g)
	}
	return &replica.Folder{Dir: dir, Trail: c.trail(i, g), KeyStoreDir: c.keyStore(i, g), BlobsDir: blobs,
		Open: func(d string) (*store.Store, error) {
			if d != dir {
				tell("adopt")
				return store.Open(d, c.options(d, c.keyStore(i, g), replica.StagedSuffix))
			}
			tell("reopen")
			s, err := store.Open(d, c.options(d, c.keyStore(i, g), ""))
			if err == nil {
				err = c.setEffects(s, i, g) // the restored store applies the next commands
			}
			return s, err
		},
		Close: func(st *store.Store) error {
			tell("close")
			return st.Close()
		}}
}

func newTestCluster(t *testing.T, groups ...uint64) *testCluster {
	return newCluster(t, make(map[uint64]*replicatest.Recorder), nil, groups...)
}

// newObservedCluster is newTestCluster with onLead seeing every
// leadership from the start.
func newObservedCluster(t *testing.T, onLead func(node int, l replica.Leadership), groups ...uint64) *testCluster {
	return newCluster(t, make(map[uint64]*replicatest.Recorder), onLead, groups...)
}

// newCluster runs the three nodes; sm nil: each group applies its
// store's commands, and the stores' writes are proposals.
func newCluster(t *testing.T, sm map[uint64]*replicatest.Recorder, onLead func(node int, l replica.Leadership), groups ...uint64) *testCluster {
	c := &testCluster{net: replica.NewLocal(), dir: t.TempDir(), groups: groups,
		nodes: make([]*node, 3), onLead: onLead}
	return c.run(t, sm)
}

// run starts the three nodes of c.
func (c *testCluster) run(t *testing.T, sm map[uint64]*replicatest.Recorder) *testCluster {
	c.Nodes = replicatest.Nodes{T: t, SM: sm, Host: func(i int) *replica.Host {
		if nd := c.nodes[i]; nd != nil {
			return nd.host
		}
		return nil
	}}
	for i := range c.nodes {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.stop(i)
		}
	})
	return c
}

// start opens node i's stores and runs its host, with a fresh log for
// each group the first time and the log on disk after that.
func (c *testCluster) start(i int) {
	c.T.Helper()
	ctx := context.Background()
	ticks := 30
	if c.SM == nil {
		// A store's writer fails when its leader loses the lease: a longer
		// timeout keeps a loaded machine's pauses from deposing leaders.
		ticks = 50
	}
	if c.blobs {
		// Each chunk of an upload is a MiB written and synced by every
		// replica of the one process: more time before an election.
		ticks = 150
	}
	reg := prometheus.NewRegistry()
	cfg := replica.Config{Transport: c.net, Tick: 10 * time.Millisecond, ElectionTicks: ticks,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LogKeep: c.logKeep, LogMaxBytes: c.logMaxBytes, Registerer: reg}
	if c.onLead != nil {
		cfg.OnLeadership = func(l replica.Leadership) { c.onLead(i, l) }
	}
	if c.onLease != nil {
		cfg.OnLease = func(l replica.LeaseChange) { c.onLease(i, l) }
	}
	h, err := replica.NewHost(cfg)
	if err != nil {
		c.T.Fatal(err)
	}
	nd := &node{host: h, reg: reg}
	for _, g := range c.groups {
		if err := c.recover(i, g); err != nil {
			c.T.Fatal(err)
		}
		s, err := store.Open(c.folder(i, g), c.options(c.folder(i, g), c.keyStore(i, g), ""))
		if err != nil {
			c.T.Fatal(err)
		}
		id := replicatest.ID(g, i)
		gc := replica.GroupConfig{Group: g, Replica: id, Peers: replicatest.Peers(g), Join: c.joining[i], Store: s,
			Folder: c.folderOf(i, g)}
		if c.SM != nil { // else the store's own commands
			if c.SM[id] == nil {
				c.SM[id] = &replicatest.Recorder{}
			}
			gc.Machine = c.SM[id]
		} else {
			if err := c.setEffects(s, i, g); err != nil {
				c.T.Fatal(err)
			}
		}
		if err := h.AddGroup(ctx, gc); err != nil {
			c.T.Fatal(err)
		}
		c.net.Attach(id, h)
		c.net.Heal(id)
	}
	h.Start(ctx)
	c.nodes[i] = nd
}

// stop stops node i's host and closes its stores, as a node that shut
// down; its replicas are cut off until it starts again.
func (c *testCluster) stop(i int) {
	nd := c.nodes[i]
	if nd == nil {
		return
	}
	c.nodes[i] = nil
	for _, g := range c.groups {
		c.net.Cut(replicatest.ID(g, i))
	}
	nd.host.Stop()
	for _, g := range c.groups {
		// The host's: a snapshot may have replaced the store opened. A
		// replica removed from its group has none: the host closed it.
		if s := nd.host.Store(g); s != nil {
			if err := s.Close(); err != nil {
				c.T.Error(err)
			}
		}
	}
}

// storeOptions open the replicas' stores: an erase held up by a reader
// gives up soon.
var storeOptions = store.Options{EraseWait: 200 * time.Millisecond}

// folder is replica (g, i)'s database folder.
func (c *testCluster) folder(i int, g uint64) string {
	return filepath.Join(c.dir, fmt.Sprintf("node%d", i), fmt.Sprintf("shard%d", g))
}

// trail is replica (g, i)'s audit trail, outside its database folder as
// a node's is.
func (c *testCluster) trail(i int, g uint64) string {
	return filepath.Join(c.dir, fmt.Sprintf("node%d", i), "audit", fmt.Sprintf("%d", g))
}

// setEffects makes s, replica (g, i)'s store, write the effects of the
// commands it applies into the replica's trail, and a sealed store
// apply its key store's commands, as serve's stores do.
func (c *testCluster) setEffects(s *store.Store, i int, g uint64) error {
	effects := map[store.EffectKind]store.Effects{
		store.EffectTrail: retention.TrailEffects(c.trail(i, g), slog.New(slog.NewTextHandler(io.Discard, nil))),
	}
	if c.blobs {
		effects[store.EffectBlobs] = attachments.ReplicaEffects(c.blobsDir(i, g), nil, slog.New(slog.DiscardHandler))
	}
	if ks, ok := s.Sealer().(*keystore.KeyStore); ok && ks != nil {
		if err := ks.ReplicateThrough(s); err != nil {
			return err
		}
		effects[store.EffectKeys] = ks.ApplyOp
	}
	for kind, fx := range effects {
		if c.wrapEffects != nil {
			fx = c.wrapEffects(i, kind, fx)
		}
		s.SetEffects(kind, fx)
	}
	return nil
}

// blobsDir is replica (g, i)'s file:// folder of attachments.
func (c *testCluster) blobsDir(i int, g uint64) string {
	return filepath.Join(c.dir, fmt.Sprintf("node%d", i), "attachments", fmt.Sprintf("%d", g))
}

// Three replicas of two groups on three hosts elect a leader per group;
// commands proposed through every node, leaders and followers alike, are
// applied once each, by every replica in the same order, and the
// commands of one proposer in the order it proposed them.
func TestGroupsElectAndApplyInOrder(t *testing.T) {
	c := newTestCluster(t, 0, 1)
	const perProposer = 15
	for _, g := range c.groups {
		c.Leader(g)
	}
	c.ProposeFromEvery(c.groups, perProposer, func(g uint64, i, k int) string { return fmt.Sprintf("g%d n%d k%02d", g, i, k) })
	for _, g := range c.groups {
		got := c.Converged(g, 3*perProposer)
		for i := range c.nodes {
			var mine []string
			for _, cmd := range got {
				if cmd[:len(fmt.Sprintf("g%d n%d", g, i))] == fmt.Sprintf("g%d n%d", g, i) {
					mine = append(mine, cmd)
				}
			}
			if !slices.IsSorted(mine) || len(mine) != perProposer {
				t.Fatalf("group %d: node %d's commands applied as %q", g, i, mine)
			}
		}
	}
}

// The leader's node stops: the two others elect a new leader and commit
// without it; started again from its store, the old leader catches up
// from the new leader's log, applying each missed command once, in order.
func TestRestartedReplicaCatchesUpFromTheLog(t *testing.T) {
	c := newTestCluster(t, 3)
	const g = 3
	for k := range 10 {
		c.Propose(k%3, g, fmt.Sprintf("before %02d", k))
	}
	c.Converged(g, 10)
	old := c.Leader(g)
	c.stop(old)
	next := c.Leader(g)
	if next == old {
		t.Fatalf("node %d still leads after it stopped", old)
	}
	for k := range 20 {
		c.Propose(next, g, fmt.Sprintf("while down %02d", k))
	}
	if n := len(c.SM[replicatest.ID(g, old)].Applied()); n != 10 {
		t.Fatalf("the stopped replica applied %d commands, want 10", n)
	}
	c.start(old)
	got := c.Converged(g, 30)
	if got[9] != "before 09" || got[29] != "while down 19" {
		t.Fatalf("applied %q", got)
	}
	last, err := c.nodes[old].store(g).RaftLog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if first, _ := last.FirstIndex(); first != 2 {
		t.Fatalf("the log was truncated to %d: it caught up by something other than the log", first)
	}
}

// A leader cut off from both peers cannot commit: a command proposed to
// it is never applied by any replica, even after it rejoins, while the
// majority elects a leader and goes on.
func TestCutOffLeaderCommitsNothing(t *testing.T) {
	c := newTestCluster(t, 5)
	const g = 5
	c.CutOffLeader(g, func(i int, on bool) {
		if on {
			c.net.Cut(replicatest.ID(g, i))
		} else {
			c.net.Heal(replicatest.ID(g, i))
		}
	})
}
