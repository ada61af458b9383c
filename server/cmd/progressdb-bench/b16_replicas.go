package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
)

// B16 measures replicated shards (spec §15): synced writes through HTTP
// on three nodes whose shards have three replicas each, against the same
// three nodes with one replica per shard, on the same cores (a ratio of
// one CPU budget); and failover: the time from a kill -9 of a shard's
// leader's process to the next write acknowledged on that shard.

const b16Replicas = 3

func runB16(ctx context.Context, b *bench) (*section, error) {
	sec := &section{}
	ec, endpoint, closeEtcd, err := b11Etcd(b.dir("b16", "etcd"))
	if err != nil {
		return sec, fmt.Errorf("embedded etcd: %w", err)
	}
	defer closeEtcd()

	dur := max(time.Duration(float64(2*time.Second)*b.o.scale), 300*time.Millisecond)
	maxOps := int64(b.scaled(200_000, 2_000))
	reps := b.reps(3)
	const writers, nThreads = 16, 300
	sec.setup = append(sec.setup, fmt.Sprintf(
		"Writes: three nodes, `serve`'s own wiring (`app.Serve`) in this process over one etcd embedded in it, "+
			"%d shards; with 1 replica per shard each node holds one shard, with %d each node holds a replica of "+
			"every shard. %d writers append (`POST /v1/threads/{tid}/messages`, 201 once durable: with replicas, "+
			"once a majority has the entry fsynced and the leader applied it) over %d threads for %s (at most %s "+
			"messages) after a tenth of that untimed, each request sent to the node owning (1 replica) or leading "+
			"(%d replicas) the thread's shard. The two layouts share this machine's cores, interleaved; %d "+
			"repetitions on fresh clusters; medians with range.",
		b11Shards, b16Replicas, writers, nThreads, dur, count(maxOps), b16Replicas, reps))

	var rate1, rate3, p991, p993 []float64
	for rep := range reps {
		for _, replicas := range []int{1, b16Replicas} {
			if err := ctx.Err(); err != nil {
				return sec, err
			}
			c, err := b16StartCluster(ctx, b, ec, endpoint, fmt.Sprintf("w%d-r%d", rep, replicas), replicas)
			if err != nil {
				return sec, err
			}
			ld, err := b11Writes(ctx, c, writers, nThreads, dur, maxOps, false)
			if cerr := c.close(); err == nil {
				err = cerr
			}
			if err != nil {
				return sec, fmt.Errorf("writes with %d replica(s): %w", replicas, err)
			}
			r, p99 := rate(ld.n, ld.dur), float64(percentile(ld.lat, 99))
			if replicas == 1 {
				rate1, p991 = append(rate1, r), append(p991, p99)
			} else {
				rate3, p993 = append(rate3, r), append(p993, p99)
			}
			b.logf("B16 rep %d: %d replica(s): %s, p99 %s", rep+1, replicas, fmtRate(r), fmtDur(time.Duration(p99)))
		}
	}
	wt := table{
		caption: "Synced writes through HTTP on three nodes: one replica per shard against three.",
		header:  []string{"replicas per shard", "msgs/s", "vs 1 replica", "p99", "p99 vs 1 replica"},
	}
	wt.add("1", spread(rate1, fmtRate), "1.00×", spread(p991, fmtDurF), "1.00×")
	wt.add(strconv.Itoa(b16Replicas), spread(rate3, fmtRate), fmtRatio(median(rate3)/median(rate1)),
		spread(p993, fmtDurF), fmtRatio(median(p993)/median(p991)))
	sec.tables = append(sec.tables, wt)
	sec.addTarget("write throughput, 3 replicas / 1 replica, same nodes and cores (recorded, no target)", "—",
		fmtRatio(median(rate3)/median(rate1)), true)
	sec.addTarget("write p99, 3 replicas / 1 replica (recorded, no target)", "—",
		fmtRatio(median(p993)/median(p991)), true)

	if err := b16Failover(ctx, b, ec, endpoint, sec); err != nil {
		return sec, fmt.Errorf("failover: %w", err)
	}
	return sec, nil
}

// b16StartCluster creates cluster name with three nodes and the replicas
// given, starts the nodes in this process and waits until every shard
// has an owner (1 replica) or a leader (more), which it records as the
// shard's node for writes.
func b16StartCluster(ctx context.Context, b *bench, ec *clientv3.Client, endpoint, name string, replicas int) (*b11Cluster, error) {
	ids := []string{"node-1", "node-2", "node-3"}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	keys := cluster.Keys{Name: "b16-" + name}
	if _, _, err := cluster.EnsureReplicated(cctx, ec, keys, b11Shards, replicas, ids); err != nil {
		return nil, err
	}
	c := &b11Cluster{name: keys.Name, owners: map[int]string{},
		client: &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 64}}}
	for _, id := range ids {
		nd, err := b11Serve(ctx, id, b.dir("b16", name, id), c.client, b16NodeEnv(endpoint, keys.Name, id))
		if err != nil {
			c.close()
			return nil, fmt.Errorf("node %s: %w", id, err)
		}
		c.nodes = append(c.nodes, nd)
	}
	if err := b16WaitShards(cctx, ec, keys, replicas, c.owners); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// b16NodeEnv is a cluster node's settings, beside its folders and address.
func b16NodeEnv(endpoint, name, id string) []string {
	return []string{
		"PROGRESSDB_ADMIN_TOKEN=" + b11Admin,
		"PROGRESSDB_CLUSTER_ETCD=" + endpoint,
		"PROGRESSDB_CLUSTER_NAME=" + name,
		"PROGRESSDB_NODE_ID=" + id,
		"PROGRESSDB_CLUSTER_SECRET=" + b11Secret,
		"PROGRESSDB_CLUSTER_SHARDS=" + strconv.Itoa(b11Shards),
	}
}

// b16WaitShards fills urls with each shard's owner (1 replica) or leader
// (more), waiting until every shard has one. A leader record is advisory
// (it may name a node that just lost the lead), which is all a bench
// needs: a request to a follower is forwarded.
func b16WaitShards(ctx context.Context, ec *clientv3.Client, keys cluster.Keys, replicas int, urls map[int]string) error {
	for {
		st, err := cluster.ReadStatus(ctx, ec, keys)
		if err != nil {
			return err
		}
		byNode := map[string]string{}
		for _, n := range st.Nodes {
			byNode[n.ID] = n.URL
		}
		for _, s := range st.Shards {
			node := ""
			if replicas == 1 {
				if s.State == cluster.ShardOwned {
					node = s.Owner
				}
			} else if l, err := b16Leader(ctx, ec, keys, s.N); err == nil {
				node = l.Node
			}
			if byNode[node] != "" {
				urls[s.N] = byNode[node]
			}
		}
		if len(urls) == b11Shards {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster %s: shards without a node after %v: %+v", keys.Name, ctx.Err(), st.Shards)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// b16Leader reads shard n's leader record.
func b16Leader(ctx context.Context, ec *clientv3.Client, keys cluster.Keys, n int) (cluster.Leader, error) {
	resp, err := ec.Get(ctx, keys.ShardLeader(n))
	if err != nil {
		return cluster.Leader{}, err
	}
	if len(resp.Kvs) == 0 {
		return cluster.Leader{}, errors.New("no leader record")
	}
	return cluster.ParseLeader(resp.Kvs[0].Value)
}

// b16Failover times, on three node processes with three replicas per
// shard, the kill -9 of shard 0's leader to the next write on shard 0
// acknowledged through another node, which is asked every 10 ms.
func b16Failover(ctx context.Context, b *bench, ec *clientv3.Client, endpoint string, sec *section) error {
	bin, err := b12Build(ctx, b)
	if err != nil {
		return err
	}
	reps := b.reps(3)
	sec.setup = append(sec.setup, fmt.Sprintf(
		"Failover: three `progressdb serve` processes (the binary of this checkout) with %d replicas per shard, "+
			"default Raft settings (100 ms ticks, an election after 2–4 s of silence). One writer appends to a "+
			"thread of shard 0 through a node that does not lead it, every 10 ms; shard 0's leader's process is "+
			"killed with SIGKILL; measured: from the kill to the first append acknowledged (201) after it. "+
			"%d repetitions on fresh clusters.", b16Replicas, reps))
	var times []float64
	for rep := range reps {
		d, err := b16FailoverOnce(ctx, b, ec, endpoint, bin, fmt.Sprintf("f%d", rep))
		if err != nil {
			return err
		}
		b.logf("B16 failover rep %d: %s", rep+1, fmtDur(d))
		times = append(times, float64(d))
	}
	ft := table{caption: "Failover: kill -9 of a shard's leader to the next acknowledged write on the shard.",
		header: []string{"replicas per shard", "kill → next acknowledged write"}}
	ft.add(strconv.Itoa(b16Replicas), spread(times, fmtDurF))
	sec.tables = append(sec.tables, ft)
	sec.addTarget("kill -9 of a leader → next acknowledged write (spec §15: a new leader serves within 10 s)", "≤ 10 s",
		fmtDurF(median(times)), median(times) <= float64(10*time.Second))
	return nil
}

func b16FailoverOnce(ctx context.Context, b *bench, ec *clientv3.Client, endpoint, bin, name string) (time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	keys := cluster.Keys{Name: "b16-" + name}
	ids := []string{"node-1", "node-2", "node-3"}
	if _, _, err := cluster.EnsureReplicated(cctx, ec, keys, b11Shards, b16Replicas, ids); err != nil {
		return 0, err
	}
	var procs []*b12Proc
	defer func() {
		for _, p := range procs {
			p.kill()
		}
	}()
	for _, id := range ids {
		dir := b.dir("b16", name, id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return 0, err
		}
		p, _, err := serveProc(cctx, bin, func(addr string) []string {
			return append(b16NodeEnv(endpoint, keys.Name, id),
				"PROGRESSDB_DB_PATH="+filepath.Join(dir, "data"),
				"PROGRESSDB_RETENTION_AUDIT_PATH="+filepath.Join(dir, "audit"),
				"PROGRESSDB_ADDR="+addr,
				"PROGRESSDB_ADVERTISE_URL=http://"+addr,
				"PROGRESSDB_LOG_LEVEL=error")
		})
		if err != nil {
			return 0, fmt.Errorf("node %s: %w", id, err)
		}
		procs = append(procs, p)
	}
	urls := map[int]string{}
	if err := b16WaitShards(cctx, ec, keys, b16Replicas, urls); err != nil {
		return 0, err
	}
	leader, err := b16Leader(cctx, ec, keys, 0)
	if err != nil {
		return 0, err
	}
	i := slices.Index(ids, leader.Node) // procs[i] serves ids[i]
	if i < 0 {
		return 0, fmt.Errorf("leader %q is no node of the cluster", leader.Node)
	}
	via := procs[(i+1)%len(procs)]
	tid := ""
	for k := 0; tid == ""; k++ {
		if c := fmt.Sprintf("b16-f%04d", k); cluster.ShardOf(c, b11Shards) == 0 {
			tid = c
		}
	}
	cl := &http.Client{Timeout: 2 * time.Second}
	if err := b16Retry(cctx, cl, via.url+"/v1/threads", fmt.Sprintf(`{"id":%q,"title":"bench","author":"writer"}`, tid)); err != nil {
		return 0, fmt.Errorf("create the thread: %w", err)
	}
	msg := `{"author":"writer","body":{"text":"failover"}}`
	if err := b16Retry(cctx, cl, via.url+"/v1/threads/"+tid+"/messages", msg); err != nil {
		return 0, fmt.Errorf("first append: %w", err)
	}
	killed := time.Now()
	procs[i].kill()
	if err := b16Retry(cctx, cl, via.url+"/v1/threads/"+tid+"/messages", msg); err != nil {
		return 0, fmt.Errorf("append after the kill: %w", err)
	}
	return time.Since(killed), nil
}

// b16Retry posts body to u every 10 ms until it answers 201.
func b16Retry(ctx context.Context, cl *http.Client, u, body string) error {
	var last string
	for {
		resp, err := cl.Post(u, "application/json", bytes.NewReader([]byte(body)))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(b))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last answer: %s)", ctx.Err(), last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
