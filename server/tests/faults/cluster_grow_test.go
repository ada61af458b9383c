package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/pkg/keystore"
)

// TestFaultGrowHomeKilled runs three node processes of the built binary
// on a cluster created with one replica per shard, writes going to shard
// 0 through the two nodes that are not its home, and asks for three
// replicas per shard (`cluster set-replicas 3`). Shard 0's home is killed
// with SIGKILL during its switch: in `make test` just after etcd shows
// the shard a group (the switch committed, its replica maybe not started),
// in `make faults` also at a random moment from the command on. etcd
// never shows the shard both a group and owned; started again on its
// folder, the home resumes: every shard ends a group of three healthy
// replicas, writes are acknowledged again, and every acknowledged write
// is there once through every node and in every node's folder of the
// shard. In `make faults` every other pair of trials seals content: the
// home's key store goes on as it is, and every replica's then finds the
// writers' author's one key of each thread (none made twice by a next
// leader that did not find it).
func TestFaultGrowHomeKilled(t *testing.T) {
	t.Parallel()
	for trial := range pick(1, suite.trials) {
		growHomeKilled(t, trial, trial%2 == 1, trial%4 >= 2)
	}
}

func growHomeKilled(t *testing.T, trial int, atRandom, sealed bool) {
	t.Helper()
	etcd := etcdtest.Start(t)
	direct := etcd.DirectClient(t)
	envs := clusterEnvs(t, strings.Join(etcd.Endpoints(), ","))
	if sealed {
		envs = sealedClusterEnvs(t, strings.Join(etcd.Endpoints(), ","))
	}
	nodes := startNodes(t, envs)
	k := cluster.Keys{Name: "progressdb"}
	m, err := cluster.ReadMap(context.Background(), direct, k)
	if err != nil {
		t.Fatal(err)
	}
	home := -1
	for i, id := range clusterIDs {
		if m.Homes[0] == id {
			home = i
		}
	}
	tids := []string{threadInShard(0, 2*trial+1), threadInShard(0, 2*trial+2)}
	var live []*server
	for i, n := range nodes {
		if i != home {
			live = append(live, n)
		}
	}
	var bothSeen atomic.Value
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	go neverBoth(watchCtx, direct, k, &bothSeen)

	ld := startLoad(t, fmt.Sprintf("g%d", trial), live, tids)
	waitFor(t, time.Minute, "writes acknowledged before set-replicas", func() bool { n, _ := ld.counts(); return n >= 20 })

	if p := runCLI(t, envs["node-1"].with("PROGRESSDB_ADVERTISE_URL", "https://127.0.0.1:1"), "cluster", "set-replicas", "3"); p.code != 0 {
		t.Fatalf("cluster set-replicas 3: %d\n%s", p.code, p.output())
	}
	if atRandom {
		time.Sleep(rand.N(2 * time.Second))
	} else {
		waitFor(t, time.Minute, "shard 0 to be a group", func() bool {
			m, err := cluster.ReadMap(context.Background(), direct, k)
			return err == nil && m.Grouped(0)
		})
	}
	nodes[home].kill()
	m, err = cluster.ReadMap(context.Background(), direct, k)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("trial %d (sealed %v): %s killed with shard 0 %s", trial, sealed, clusterIDs[home], map[bool]string{true: "a group", false: "owned"}[m.Grouped(0)])
	before, _ := ld.counts()
	nodes[home] = startClusterNodeAt(t, envs[clusterIDs[home]], nodes[home].addr())

	waitFor(t, 2*time.Minute, "every shard a group of three healthy replicas", func() bool {
		st := clusterState(t, live[0])
		for _, s := range st.Shards {
			if s.UnderReplicated || len(s.Replicas) != 3 || s.State != cluster.ShardOwned {
				return false
			}
		}
		return true
	})
	waitFor(t, time.Minute, "writes acknowledged after the restart", func() bool { n, _ := ld.counts(); return n >= before+20 })
	written := ld.end()
	stopWatch()
	if v := bothSeen.Load(); v != nil {
		t.Fatalf("etcd showed shard %v a group and owned at once", v)
	}
	acked, refused := ld.counts()
	t.Logf("trial %d: %d writes acknowledged, %d refused or failed", trial, acked, refused)
	for tid, as := range written {
		checkOnce(t, nodes, tid, as)
	}
	for _, n := range nodes {
		if code := n.stop(t); code != 0 {
			t.Fatalf("node exit status %d after SIGTERM\n%s", code, n.output())
		}
	}
	if sealed {
		checkAuthorKeys(t, envs, 0, tids)
		return
	}
	checkFolders(t, envs, 0, written)
}

// checkAuthorKeys checks every node's key store of shard n: the load's
// author ("a") has key 1 of each thread tids, and no other.
func checkAuthorKeys(t *testing.T, envs map[string]envVars, n int, tids []string) {
	t.Helper()
	ctx := context.Background()
	kek, err := keystore.OpenKEK(ctx, clusterKEK)
	if err != nil {
		t.Fatal(err)
	}
	defer kek.Close()
	var want []keystore.KeyRef
	for _, tid := range tids {
		want = append(want, keystore.KeyRef{Thread: tid, Number: 1})
	}
	slices.SortFunc(want, func(a, b keystore.KeyRef) int { return strings.Compare(a.Thread, b.Thread) })
	for _, id := range clusterIDs {
		ks, err := keystore.Open(ctx, cluster.ShardKeystorePath(envs[id]["PROGRESSDB_KEYSTORE_PATH"], n),
			keystore.Options{Keeper: kek, MustExist: true})
		if err != nil {
			t.Fatalf("%s's key store of shard %d: %v", id, n, err)
		}
		got, err := ks.AuthorKeys(ctx, "a")
		if cerr := ks.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(got, func(a, b keystore.KeyRef) int { return strings.Compare(a.Thread, b.Thread) })
		if !slices.Equal(got, want) {
			t.Errorf("%s's key store of shard %d finds the author's keys %v, want %v", id, n, got, want)
		}
	}
}

// neverBoth reads etcd until ctx ends and records in seen a shard it
// found a group (a set in the map) with an ownership key at the same
// revision.
func neverBoth(ctx context.Context, c *clientv3.Client, k cluster.Keys, seen *atomic.Value) {
	for ctx.Err() == nil {
		resp, err := c.Get(ctx, "/"+k.Name+"/shards/", clientv3.WithPrefix())
		if err == nil {
			var m cluster.Map
			owned := map[int]bool{}
			for _, kv := range resp.Kvs {
				key := string(kv.Key)
				if key == k.ShardMap() {
					_ = json.Unmarshal(kv.Value, &m)
				}
				for n := range clusterShards {
					if key == k.ShardOwner(n) {
						owned[n] = true
					}
				}
			}
			for n := range clusterShards {
				if owned[n] && m.Grouped(n) {
					seen.Store(n)
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}
