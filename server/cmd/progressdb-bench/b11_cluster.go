package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// B11 measures cluster mode on one machine: real nodes (`serve`'s own
// wiring, app.Serve, in this process) over a real etcd embedded in this
// process, on loopback. All nodes share the machine's cores, so 1 node
// against 3 is a ratio of the same CPU budget, not a scaling figure.

const (
	b11Shards = 3
	b11Secret = "b11-cluster-secret-0123456789"
	b11Admin  = "b11-admin-token"
)

// b11Node is one node served in this process.
type b11Node struct {
	id, url, dir string
	stop         context.CancelFunc
	done         chan error
}

func (n *b11Node) shutdown() error {
	n.stop()
	return <-n.done
}

// b11Cluster is one cluster (a name in the shared etcd) and its nodes.
type b11Cluster struct {
	name   string
	nodes  []*b11Node
	owners map[int]string // shard → URL of its owner
	client *http.Client
}

func (c *b11Cluster) close() error {
	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, n.shutdown())
	}
	return errors.Join(errs...)
}

// nonOwner is the URL of a node that does not own shard n.
func (c *b11Cluster) nonOwner(n int) string {
	for _, nd := range c.nodes {
		if nd.url != c.owners[n] {
			return nd.url
		}
	}
	return ""
}

func runB11(ctx context.Context, b *bench) (*section, error) {
	sec := &section{}
	ec, endpoint, closeEtcd, err := b11Etcd(b.dir("b11", "etcd"))
	if err != nil {
		return sec, fmt.Errorf("embedded etcd: %w", err)
	}
	defer closeEtcd()

	dur := max(time.Duration(float64(2*time.Second)*b.o.scale), 300*time.Millisecond)
	maxOps := int64(b.scaled(200_000, 2_000))
	reps := b.reps(3)
	const writers, nThreads = 16, 300
	sec.setup = append(sec.setup, fmt.Sprintf(
		"Nodes are `serve`'s own wiring (`app.Serve`) in this process, each on its own loopback port and "+
			"folders, over one etcd embedded in this process; every cluster has %d shards. All nodes share "+
			"this machine's cores, so 3 nodes against 1 is the same CPU budget split three ways: a ratio, not "+
			"a scaling claim. Writes: %d writers append (`POST /v1/threads/{tid}/messages`, durable 201) over "+
			"%d threads for %s (at most %s messages) after a tenth of that untimed; \"to the owner\" sends each "+
			"request to the node owning the thread's shard, \"to any node\" round-robin over the nodes (two "+
			"in three forwarded). %d repetitions, each on fresh clusters; medians with range.",
		b11Shards, writers, nThreads, dur, count(maxOps), reps))

	var one, threeOwner, threeAny []float64
	var oneP99, threeP99 []float64
	for rep := range reps {
		for _, layout := range []struct {
			nodes int
			any   bool
		}{{1, false}, {3, false}, {3, true}} {
			if err := ctx.Err(); err != nil {
				return sec, err
			}
			name := fmt.Sprintf("w%d-%d-%t", rep, layout.nodes, layout.any)
			c, err := b11StartCluster(ctx, b, ec, endpoint, name, layout.nodes, nil, nil)
			if err != nil {
				return sec, err
			}
			ld, err := b11Writes(ctx, c, writers, nThreads, dur, maxOps, layout.any)
			if cerr := c.close(); err == nil {
				err = cerr
			}
			if err != nil {
				return sec, fmt.Errorf("writes on %d nodes: %w", layout.nodes, err)
			}
			r := rate(ld.n, ld.dur)
			switch {
			case layout.nodes == 1:
				one, oneP99 = append(one, r), append(oneP99, float64(percentile(ld.lat, 99)))
			case layout.any:
				threeAny = append(threeAny, r)
			default:
				threeOwner, threeP99 = append(threeOwner, r), append(threeP99, float64(percentile(ld.lat, 99)))
			}
			b.logf("B11 rep %d: %d node(s)%s: %s, p99 %s", rep+1, layout.nodes, map[bool]string{true: " (any node)"}[layout.any],
				fmtRate(r), fmtDur(percentile(ld.lat, 99)))
		}
	}
	wt := table{
		caption: "Synced writes through HTTP: one node holding the 3 shards against three nodes holding one each.",
		header:  []string{"layout", "msgs/s", "vs 1 node", "p99"},
	}
	wt.add("1 node, 3 shards", spread(one, fmtRate), "1.00×", fmtDurF(median(oneP99)))
	wt.add("3 nodes, to the owner", spread(threeOwner, fmtRate), fmtRatio(median(threeOwner)/median(one)), fmtDurF(median(threeP99)))
	wt.add("3 nodes, to any node", spread(threeAny, fmtRate), fmtRatio(median(threeAny)/median(one)), "")
	sec.tables = append(sec.tables, wt)
	sec.addTarget("3 nodes vs 1 node on the same cores, to the owner (recorded, no target)", "—",
		fmtRatio(median(threeOwner)/median(one)), true)

	if err := b11Forwarding(ctx, b, ec, endpoint, sec); err != nil {
		return sec, err
	}
	if err := b11Purge(ctx, b, ec, endpoint, sec); err != nil {
		return sec, err
	}
	return sec, nil
}

// b11Forwarding times one client's requests for a thread asked of its
// shard's owner against the same asked of another node, with the nodes
// in plain HTTP and then with mutual TLS between them (spec §14).
func b11Forwarding(ctx context.Context, b *bench, ec *clientv3.Client, endpoint string, sec *section) error {
	reads, appends := b.scaled(4000, 500), b.scaled(400, 100)
	sec.setup = append(sec.setup, fmt.Sprintf(
		"Forwarding: one client, three nodes; a thread's read (`GET /v1/threads/{tid}/messages`, one message) "+
			"%d times and an append %d times, asked alternately of the shard's owner and of another node "+
			"(which forwards it with the cluster secret and its epoch); medians. Then the same on three nodes "+
			"with mutual TLS (certificates of one CA, P-256): the client speaks HTTP/1.1 over TLS, the nodes "+
			"HTTP/2 over mutual TLS to each other.", reads, appends))
	t := table{caption: "Forwarding overhead: the same request asked of the owner and of another node, without and with TLS.",
		header: []string{"request", "nodes", "to the owner (p50)", "to another node (p50)", "added", "owner p99", "forwarded p99"}}
	tc, err := newB11TLS(b.dir("b11", "tls"))
	if err != nil {
		return err
	}
	added := map[string][2]time.Duration{} // request → added p50 without, with TLS
	for mode, cfg := range []*b11TLS{nil, tc} {
		name, label := "fwd", "plain HTTP"
		if cfg != nil {
			name, label = "fwd-tls", "mutual TLS"
		}
		got, err := b11ForwardingRun(ctx, b, ec, endpoint, name, cfg, reads, appends)
		if err != nil {
			return err
		}
		for _, r := range got {
			t.add(r.name, label, fmtDur(r.own50), fmtDur(r.fwd50), fmtDur(r.fwd50-r.own50), fmtDur(r.own99), fmtDur(r.fwd99))
			a := added[r.name]
			a[mode] = r.fwd50 - r.own50
			added[r.name] = a
			b.logf("B11 forwarding %s over %s: owner %s, forwarded %s", r.name, label, fmtDur(r.own50), fmtDur(r.fwd50))
		}
	}
	sec.tables = append(sec.tables, t)
	for _, name := range []string{"read", "append (synced)"} {
		a := added[name]
		if a[0] > 0 {
			sec.addTarget("forwarding cost of a "+name+", mutual TLS vs plain HTTP (added p50; recorded, no target)", "—",
				fmtRatio(float64(a[1])/float64(a[0])), true)
		}
	}
	return nil
}

// b11Fwd is one request's timings of b11ForwardingRun.
type b11Fwd struct {
	name                       string
	own50, fwd50, own99, fwd99 time.Duration
}

// b11ForwardingRun times the reads and appends on a fresh cluster of
// three nodes (with mutual TLS when tc is set).
func b11ForwardingRun(ctx context.Context, b *bench, ec *clientv3.Client, endpoint, name string, tc *b11TLS,
	reads, appends int) ([]b11Fwd, error) {
	c, err := b11StartCluster(ctx, b, ec, endpoint, name, 3, tc, nil)
	if err != nil {
		return nil, err
	}
	defer c.close()
	tid := "b11-fwd"
	shard := cluster.ShardOf(tid, b11Shards)
	if err := b11Do(c.client, "POST", c.owners[shard]+"/v1/threads", fmt.Sprintf(`{"id":%q,"title":"t","author":"a"}`, tid), http.StatusCreated); err != nil {
		return nil, err
	}
	msg := `{"author":"writer","body":{"text":"a message of about sixty bytes, like a short chat line"}}`
	if err := b11Do(c.client, "POST", c.owners[shard]+"/v1/threads/"+tid+"/messages", msg, http.StatusCreated); err != nil {
		return nil, err
	}
	var out []b11Fwd
	for _, r := range []struct {
		name, method, body string
		n, code            int
	}{{"read", "GET", "", reads, http.StatusOK}, {"append (synced)", "POST", msg, appends, http.StatusCreated}} {
		var own, fwd []time.Duration
		path := "/v1/threads/" + tid + "/messages"
		for i := range r.n + 20 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			for j, base := range []string{c.owners[shard], c.nonOwner(shard)} {
				t0 := time.Now()
				if err := b11Do(c.client, r.method, base+path, r.body, r.code); err != nil {
					return nil, err
				}
				if i < 20 { // warm the connections
					continue
				}
				if j == 0 {
					own = append(own, time.Since(t0))
				} else {
					fwd = append(fwd, time.Since(t0))
				}
			}
		}
		slices.Sort(own)
		slices.Sort(fwd)
		out = append(out, b11Fwd{name: r.name, own50: percentile(own, 50), fwd50: percentile(fwd, 50),
			own99: percentile(own, 99), fwd99: percentile(fwd, 99)})
	}
	return out, nil
}

// b11Purge seeds the same threads into one node's single store and into
// three nodes' shards, and times POST /admin/retention/run on each.
func b11Purge(ctx context.Context, b *bench, ec *clientv3.Client, endpoint string, sec *section) error {
	n := b.scaled(6000, 600)
	ps := threadsOf("b11", 0, n, 5, 1, 2) // half the threads eligible
	reps := b.reps(3)
	sec.setup = append(sec.setup, fmt.Sprintf(
		"Purge: %s threads of 5 messages, every other one soft-deleted long enough ago to be eligible (%s "+
			"threads to purge), seeded into one single-node store and, split by shard, into the shard folders "+
			"of three nodes (before they start). `POST /admin/retention/run` waits for the run: on the single "+
			"node one run, on the cluster one run per shard at once, each by its owner. Batches of 1,000, no "+
			"pause, no erasure. %d repetitions on fresh copies; medians with range.",
		count(int64(n)), count(int64(len(eligibleIDs(ps)))), reps))
	env := []string{"PROGRESSDB_RETENTION_ENABLED=true", "PROGRESSDB_RETENTION_CRON=0 2 1 1 *"}
	var single, sharded []float64
	var purgedSingle, purgedSharded int64
	for rep := range reps {
		// One node, one store.
		dir := b.dir("b11", fmt.Sprintf("purge-single-%d", rep))
		st, err := store.Open(filepath.Join(dir, "data"), store.Options{})
		if err != nil {
			return err
		}
		_, err = newGenerator("b11", time.Now()).seed(ctx, b, st, "B11 seed single node", ps, false)
		if cerr := st.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		nd, err := b11Serve(ctx, "", dir, http.DefaultClient, append(env, "PROGRESSDB_ADMIN_TOKEN="+b11Admin))
		if err != nil {
			return err
		}
		cl := &http.Client{Timeout: 10 * time.Minute}
		t0 := time.Now()
		var res struct {
			Status string `json:"status"`
			Purged int64  `json:"purged"`
		}
		err = adminCall(cl, http.MethodPost, nd.url+"/admin/retention/run", "", http.StatusOK, &res)
		d := time.Since(t0)
		if serr := nd.shutdown(); err == nil {
			err = serr
		}
		if err != nil {
			return fmt.Errorf("single-node purge: %w", err)
		}
		if res.Status != "completed" {
			return fmt.Errorf("single-node purge: %+v", res)
		}
		single, purgedSingle = append(single, float64(d)), res.Purged

		// Three nodes, a shard each: the same threads, split by shard.
		name := fmt.Sprintf("purge-%d", rep)
		seed := func(nodeDir string, shard int) error {
			var mine []threadPlan
			for _, p := range ps {
				if cluster.ShardOf(p.id, b11Shards) == shard {
					mine = append(mine, p)
				}
			}
			st, err := store.Open(cluster.ShardDBPath(filepath.Join(nodeDir, "data"), shard), store.Options{})
			if err != nil {
				return err
			}
			_, err = newGenerator("b11", time.Now()).seed(ctx, b, st, fmt.Sprintf("B11 seed shard %d", shard), mine, false)
			if cerr := st.Close(); err == nil {
				err = cerr
			}
			return err
		}
		c, err := b11StartCluster(ctx, b, ec, endpoint, name, 3, nil, seed, env...)
		if err != nil {
			return err
		}
		t0 = time.Now()
		var out struct {
			Shards []struct {
				Shard  int    `json:"shard"`
				Code   int    `json:"code"`
				Error  string `json:"error"`
				Result struct {
					Status string `json:"status"`
					Purged int64  `json:"purged"`
				} `json:"result"`
			} `json:"shards"`
		}
		err = adminCall(cl, http.MethodPost, c.nodes[0].url+"/admin/retention/run", "", http.StatusOK, &out)
		d = time.Since(t0)
		if cerr := c.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("cluster purge: %w", err)
		}
		purgedSharded = 0
		for _, s := range out.Shards {
			if s.Code != http.StatusOK || s.Result.Status != "completed" {
				return fmt.Errorf("cluster purge, shard %d: %d %s %+v", s.Shard, s.Code, s.Error, s.Result)
			}
			purgedSharded += s.Result.Purged
		}
		if purgedSharded != purgedSingle {
			return fmt.Errorf("the cluster purged %d threads, the single node %d", purgedSharded, purgedSingle)
		}
		sharded = append(sharded, float64(d))
		b.logf("B11 purge rep %d: single node %s, 3 shards on 3 nodes %s (%d purged)", rep+1,
			fmtDurF(single[len(single)-1]), fmtDur(d), purgedSingle)
	}
	t := table{caption: "A purge run, end to end through `POST /admin/retention/run`.",
		header: []string{"layout", "threads purged", "run", "threads/s", "vs one node"}}
	t.add("one node, one store", count(purgedSingle), spread(single, fmtDurF), fmtRate(float64(purgedSingle)/(median(single)/1e9)), "1.00×")
	t.add("3 nodes, a shard each", count(purgedSharded), spread(sharded, fmtDurF), fmtRate(float64(purgedSharded)/(median(sharded)/1e9)),
		fmtRatio(median(single)/median(sharded)))
	sec.tables = append(sec.tables, t)
	sec.addTarget("purge over 3 shards on 3 nodes vs one node, same data (speed-up; recorded, no target)", "—",
		fmtRatio(median(single)/median(sharded)), true)
	return nil
}

// b11Writes creates the threads through their owners, then drives
// appends to the owners or round-robin to every node.
func b11Writes(ctx context.Context, c *b11Cluster, writers, nThreads int, dur time.Duration, maxOps int64, anyNode bool) (b9Load, error) {
	tids := make([]string, nThreads)
	for i := range tids {
		tids[i] = fmt.Sprintf("b11-w%04d", i)
		if err := b11Do(c.client, "POST", c.owners[cluster.ShardOf(tids[i], b11Shards)]+"/v1/threads",
			fmt.Sprintf(`{"id":%q,"title":"bench","author":"writer"}`, tids[i]), http.StatusCreated); err != nil {
			return b9Load{}, err
		}
	}
	body := []byte(`{"author":"writer","body":{"text":"a message of about sixty bytes, like a short chat line"}}`)
	return b9Drive(ctx, writers, dur, maxOps, nil, nil, func(w, k int) error {
		i := w + k*writers
		tid := tids[i%len(tids)]
		base := c.owners[cluster.ShardOf(tid, b11Shards)]
		if anyNode {
			base = c.nodes[i%len(c.nodes)].url
		}
		resp, err := c.client.Post(base+"/v1/threads/"+tid+"/messages", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("append: status %d", resp.StatusCode)
		}
		return nil
	})
}

// b11StartCluster creates cluster name with nodes node-1…node-N in etcd,
// calls seed (when set) for each node's folder and each shard it holds,
// starts the nodes and waits until every shard is owned.
func b11StartCluster(ctx context.Context, b *bench, ec *clientv3.Client, endpoint, name string, nodes int,
	tc *b11TLS, seed func(nodeDir string, shard int) error, env ...string) (*b11Cluster, error) {
	var ids []string
	for i := range nodes {
		ids = append(ids, fmt.Sprintf("node-%d", i+1))
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	keys := cluster.Keys{Name: "b11-" + name}
	if err := cluster.CreateCluster(cctx, ec, keys, b11Shards, ids); err != nil {
		return nil, err
	}
	// The client speaks HTTP/1.1, over TLS with mutual TLS on, so that the
	// two runs differ only by the nodes' TLS.
	c := &b11Cluster{name: keys.Name, owners: map[int]string{},
		client: &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 64,
			TLSClientConfig: tc.clientConfig()}}}
	for i, id := range ids {
		dir := b.dir("b11", name, id)
		if seed != nil {
			for s := range b11Shards {
				if s%nodes == i { // round robin, as cluster create spreads them
					if err := seed(dir, s); err != nil {
						c.close()
						return nil, err
					}
				}
			}
		}
		nodeEnv, err := tc.nodeEnv(dir, id)
		if err != nil {
			c.close()
			return nil, err
		}
		nd, err := b11Serve(ctx, id, dir, c.client, append(append(slices.Clone(env), nodeEnv...),
			"PROGRESSDB_ADMIN_TOKEN="+b11Admin,
			"PROGRESSDB_CLUSTER_ETCD="+endpoint,
			"PROGRESSDB_CLUSTER_NAME="+keys.Name,
			"PROGRESSDB_NODE_ID="+id,
			"PROGRESSDB_CLUSTER_SECRET="+b11Secret,
			"PROGRESSDB_CLUSTER_SHARDS="+strconv.Itoa(b11Shards)))
		if err != nil {
			c.close()
			return nil, fmt.Errorf("node %s: %w", id, err)
		}
		c.nodes = append(c.nodes, nd)
	}
	for {
		st, err := cluster.ReadStatus(cctx, ec, keys)
		if err != nil {
			c.close()
			return nil, err
		}
		urls := map[string]string{}
		for _, n := range st.Nodes {
			urls[n.ID] = n.URL
		}
		for _, s := range st.Shards {
			if s.State == cluster.ShardOwned && urls[s.Owner] != "" {
				c.owners[s.N] = urls[s.Owner]
			}
		}
		if len(c.owners) == b11Shards {
			return c, nil
		}
		select {
		case <-cctx.Done():
			c.close()
			return nil, fmt.Errorf("cluster %s: shards not owned: %+v", keys.Name, st.Shards)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// b11Serve runs app.Serve for the settings given, with its folders under
// dir (a single node when id is empty), and waits until it answers.
func b11Serve(ctx context.Context, id, dir string, client *http.Client, env []string) (*b11Node, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	env = append(env,
		"PROGRESSDB_DB_PATH="+filepath.Join(dir, "data"),
		"PROGRESSDB_RETENTION_AUDIT_PATH="+filepath.Join(dir, "audit"),
		"PROGRESSDB_ADDR="+addr,
		"PROGRESSDB_LOG_LEVEL=error")
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, config.VarKEK+"=") }) {
		env = append(env, config.VarKeystorePath+"="+filepath.Join(dir, "keys")) // sealed (B13E)
	}
	scheme := "http"
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, config.VarClusterTLSCert+"=") }) {
		scheme = "https"
	}
	if id != "" {
		env = append(env, "PROGRESSDB_ADVERTISE_URL="+scheme+"://"+addr)
	}
	cfg, err := config.Load(env)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	n := &b11Node{id: id, url: scheme + "://" + addr, dir: dir, stop: cancel, done: make(chan error, 1)}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	go func() { n.done <- app.Serve(sctx, cfg, logger) }()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := client.Get(n.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return n, nil
			}
		}
		select {
		case err := <-n.done:
			cancel()
			return nil, fmt.Errorf("serve stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(errors.New("no /healthz after a minute"), n.shutdown())
		}
	}
}

// b11Do sends one request and checks its status.
func b11Do(cl *http.Client, method, u, body string, want int) error {
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, u, resp.StatusCode, bytes.TrimSpace(b))
	}
	return nil
}

// b11Etcd starts an etcd in dir (b11StartEtcd) and a client of it; close
// stops both.
func b11Etcd(dir string) (ec *clientv3.Client, endpoint string, close func(), err error) {
	etcd, err := b11StartEtcd(dir)
	if err != nil {
		return nil, "", nil, err
	}
	endpoint = "http://" + etcd.Clients[0].Addr().String()
	ec, err = clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		etcd.Close()
		return nil, "", nil, err
	}
	return ec, endpoint, func() { _ = ec.Close(); etcd.Close() }, nil
}

// b11StartEtcd starts a single-member etcd on free loopback ports in dir.
func b11StartEtcd(dir string) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cu := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	pu := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-time.After(time.Minute):
		e.Close()
		return nil, errors.New("not ready after a minute")
	}
}
