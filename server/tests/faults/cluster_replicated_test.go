package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/testtools/tcpproxy"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// startReplicatedNodes starts the three nodes, creates the cluster with
// three replicas of each shard and waits until every shard's group has
// published a leader.
func startReplicatedNodes(t testing.TB, envs map[string]envVars, etcd *clientv3.Client) []*server {
	t.Helper()
	return startReplicatedOn(t, clusterIDs, envs, etcd)
}

// startReplicatedOn is startReplicatedNodes for the nodes ids.
func startReplicatedOn(t testing.TB, ids []string, envs map[string]envVars, etcd *clientv3.Client) []*server {
	t.Helper()
	nodes := make([]*server, len(ids))
	for i, id := range ids {
		nodes[i] = launchClusterNode(t, envs[id], freeAddr(t))
	}
	if p := runCLI(t, envs[ids[0]].with("PROGRESSDB_ADVERTISE_URL", "https://127.0.0.1:1"), "cluster", "create",
		"--replicas", "3", "--nodes", strings.Join(ids, ",")); p.code != 0 {
		t.Fatalf("cluster create --replicas 3: %d\n%s", p.code, p.output())
	}
	for _, n := range nodes {
		waitNodeUp(t, n)
	}
	for n := range clusterShards {
		waitLeaderRecord(t, etcd, n, func(cluster.Leader) bool { return true })
	}
	return nodes
}

// waitLeaderRecord waits until shard n's leader record is one ok accepts.
func waitLeaderRecord(t testing.TB, etcd *clientv3.Client, n int, ok func(cluster.Leader) bool) cluster.Leader {
	t.Helper()
	var l cluster.Leader
	waitFor(t, time.Minute, fmt.Sprintf("a leader record of shard %d", n), func() bool {
		resp, err := etcd.Get(context.Background(), cluster.Keys{Name: "progressdb"}.ShardLeader(n))
		if err != nil || len(resp.Kvs) == 0 {
			return false
		}
		got, err := cluster.ParseLeader(resp.Kvs[0].Value)
		if err != nil || !ok(got) {
			return false
		}
		l = got
		return true
	})
	return l
}

// appliedIndex reads progressdb_replica_applied_index of shard n from
// node s's /metrics; -1 when it does not answer.
func appliedIndex(s *server, n int) int64 {
	resp, err := httpClient.Get(s.url + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	prefix := fmt.Sprintf(`progressdb_replica_applied_index{shard="%d"} `, n)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return int64(f)
			}
		}
	}
	return -1
}

// ack is a write acknowledged with 201: its body, when it was sent and
// when its answer came.
type ack struct {
	body       string
	sent, done time.Time
}

// writer appends messages to thread tid through node s until stop is
// closed, each with a body of its own, and keeps those acknowledged. A
// refused or failed write (503 while the shard has no leader, a broken
// connection) is not retried: its outcome is unknown, and the next one
// is a new write.
func writer(s *server, tid, name string, stop <-chan struct{}, mu *sync.Mutex, acks *[]ack, refused *int) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		body := fmt.Sprintf("%s-%04d", name, i)
		data, _ := json.Marshal(map[string]string{"author": "a", "body": body})
		sent := time.Now()
		resp, err := httpClient.Post(s.url+"/v1/threads/"+tid+"/messages", "application/json", bytes.NewReader(data))
		ok := err == nil && resp.StatusCode == http.StatusCreated
		if err == nil {
			resp.Body.Close()
		}
		mu.Lock()
		if ok {
			*acks = append(*acks, ack{body: body, sent: sent, done: time.Now()})
		} else {
			*refused++
		}
		mu.Unlock()
		if !ok {
			// An election takes seconds: no need to ask hundreds of
			// times meanwhile.
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// load is one writer per (node, thread) pair, each appending messages
// of its own (writer) until stopped.
type load struct {
	tids    []string
	mu      sync.Mutex
	acks    [][]ack
	refused []int
	stop    chan struct{}
	wg      sync.WaitGroup
}

// startLoad starts a writer through via[i] on tids[i], each thread
// created first.
func startLoad(t testing.TB, name string, via []*server, tids []string) *load {
	t.Helper()
	l := &load{tids: tids, acks: make([][]ack, len(tids)), refused: make([]int, len(tids)), stop: make(chan struct{})}
	for i, tid := range tids {
		via[i].mustCall(t, "POST", "/v1/threads", map[string]string{"id": tid, "title": "load", "author": "a"}, "", http.StatusCreated, nil)
	}
	for i := range tids {
		// By URL: a node restarted on its address takes the writes again.
		s := &server{url: via[i].url}
		l.wg.Go(func() { writer(s, tids[i], fmt.Sprintf("%s-w%d", name, i), l.stop, &l.mu, &l.acks[i], &l.refused[i]) })
	}
	return l
}

// fewestSince is the fewest writes acknowledged on one thread among
// those sent after at.
func (l *load) fewestSince(at time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	fewest := -1
	for _, as := range l.acks {
		n := 0
		for _, a := range as {
			if a.sent.After(at) {
				n++
			}
		}
		if fewest < 0 || n < fewest {
			fewest = n
		}
	}
	return fewest
}

// since counts the writes acknowledged on the threads numbered in which
// (every thread when none is named) among those sent after at, and
// returns when the first of them was acknowledged.
func (l *load) since(at time.Time, which ...int) (n int, first time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, as := range l.acks {
		if len(which) > 0 && !slices.Contains(which, i) {
			continue
		}
		for _, a := range as {
			if a.sent.After(at) {
				n++
				if first.IsZero() || a.done.Before(first) {
					first = a.done
				}
			}
		}
	}
	return n, first
}

// waitAcked waits until every writer has n writes acknowledged among
// those sent after at.
func (l *load) waitAcked(t testing.TB, n int, at time.Time, what string) {
	t.Helper()
	waitFor(t, 2*time.Minute, what, func() bool { return l.fewestSince(at) >= n })
}

// end stops the writers and returns each thread's acknowledged writes.
func (l *load) end() map[string][]ack {
	close(l.stop)
	l.wg.Wait()
	out := map[string][]ack{}
	for i, tid := range l.tids {
		out[tid] = l.acks[i]
	}
	return out
}

// counts is how many writes were acknowledged and refused or failed.
func (l *load) counts() (acked, refused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.acks {
		acked += len(l.acks[i])
		refused += l.refused[i]
	}
	return acked, refused
}

// messageBodies lists thread tid's message bodies as node s serves them,
// every page of them.
func messageBodies(t testing.TB, s *server, tid string) []string {
	t.Helper()
	var out []string
	cursor := ""
	for {
		var page struct {
			Messages []struct {
				Body string `json:"body"`
			} `json:"messages"`
			NextCursor string `json:"next_cursor"`
		}
		s.mustCall(t, "GET", "/v1/threads/"+tid+"/messages?limit=1000&cursor="+url.QueryEscape(cursor), nil, "", http.StatusOK, &page)
		for _, m := range page.Messages {
			out = append(out, m.Body)
		}
		if cursor = page.NextCursor; cursor == "" {
			return out
		}
	}
}

// TestFaultReplicatedLeaderKilled runs three node processes of the built
// binary over an etcd, created with three replicas per shard: threads
// written through every node (leaders and followers) read back through
// every node. Then, under a steady write load through the two other
// nodes, the node leading shard 0 is killed with SIGKILL: a new leader
// of a later term is elected and published, writes resume (the time from
// the kill to the first acknowledged write sent after it is logged: the
// failover figure), and no acknowledged write is missing or doubled. The
// killed node restarts on its folder and catches up; after the nodes
// stop, every node's folder of shard 0 holds every acknowledged write.
func TestFaultReplicatedLeaderKilled(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	direct := etcd.DirectClient(t)
	envs := clusterEnvs(t, strings.Join(etcd.Endpoints(), ","))
	nodes := startReplicatedNodes(t, envs, direct)

	var threads []string
	for i := range 9 {
		tid := fmt.Sprintf("r%02d", i)
		via := nodes[i%len(nodes)]
		via.mustCall(t, "POST", "/v1/threads", map[string]string{"id": tid, "title": "t", "author": "a"}, "", http.StatusCreated, nil)
		via.mustCall(t, "POST", "/v1/threads/"+tid+"/messages", map[string]any{"author": "a", "body": tid}, "", http.StatusCreated, nil)
		threads = append(threads, tid)
	}
	for _, n := range nodes {
		for _, tid := range threads {
			if got := messageBodies(t, n, tid); !slices.Equal(got, []string{tid}) {
				t.Fatalf("thread %s through %s: %v", tid, n.url, got)
			}
		}
		if got := listAll(t, n); !slices.Equal(got, threads) {
			t.Fatalf("listing through %s = %v, want %v", n.url, got, threads)
		}
	}

	// One kill in `make test`, FAULT_TRIALS kills in a row in `make
	// faults`, each of the leader of the moment.
	written := map[string][]ack{}
	for trial := range pick(1, suite.trials) {
		for tid, as := range killLeaderUnderLoad(t, trial, nodes, envs, direct) {
			written[tid] = as
		}
	}
	for _, n := range nodes {
		if code := n.stop(t); code != 0 {
			t.Fatalf("node exit status %d after SIGTERM\n%s", code, n.output())
		}
	}
	checkFolders(t, envs, 0, written)
}

// killLeaderUnderLoad kills the node leading shard 0 with SIGKILL while
// the two others take a steady write load, one thread each: a leader of
// a later term on another node is published, writes resume, and every
// acknowledged write is there once through both. The killed node is
// started again on its folder, and every replica of shard 0 applies as
// far as the others. It returns each thread's acknowledged writes.
func killLeaderUnderLoad(t *testing.T, trial int, nodes []*server, envs map[string]envVars, direct *clientv3.Client) map[string][]ack {
	t.Helper()
	old := waitLeaderRecord(t, direct, 0, func(cluster.Leader) bool { return true })
	dead := slices.Index(clusterIDs, old.Node)
	var live []*server
	for i, n := range nodes {
		if i != dead {
			live = append(live, n)
		}
	}
	ld := startLoad(t, fmt.Sprintf("t%d", trial), live, []string{threadInShard(0, 2*trial+1), threadInShard(0, 2*trial+2)})
	waitFor(t, time.Minute, "writes acknowledged before the kill", func() bool { n, _ := ld.since(time.Time{}); return n >= 40 })
	killed := time.Now()
	nodes[dead].kill()
	next := waitLeaderRecord(t, direct, 0, func(l cluster.Leader) bool { return l.Term > old.Term && l.Node != old.Node })
	waitFor(t, time.Minute, "writes acknowledged after the kill", func() bool { n, _ := ld.since(killed); return n >= 40 })
	written := ld.end()
	// The failover time: from the kill to the first write sent after it
	// that was acknowledged.
	_, first := ld.since(killed)
	acked, refused := ld.counts()
	t.Logf("trial %d: failover: leader %s of shard 0 (term %d) killed; %s leads in term %d; the first write sent after the kill acknowledged %s after it; %d writes acknowledged, %d refused or failed",
		trial, old.Node, old.Term, next.Node, next.Term, first.Sub(killed).Round(time.Millisecond), acked, refused)

	// Every acknowledged write is there once, through both live nodes;
	// a refused one may be there too (its outcome was unknown), never
	// twice.
	for tid, as := range written {
		checkOnce(t, live, tid, as)
	}

	// The killed node comes back on its folder and catches up from the
	// leader's log: every replica applies as far as the others.
	nodes[dead] = startClusterNodeAt(t, envs[old.Node], nodes[dead].addr())
	waitFor(t, time.Minute, "every replica of shard 0 to apply as far as the others", func() bool { return sameApplied(nodes, 0) })
	return written
}

// checkFolders opens every node's folder of shard n, the nodes stopped,
// and checks that each acknowledged write of each thread is there once.
func checkFolders(t *testing.T, envs map[string]envVars, n int, written map[string][]ack) {
	t.Helper()
	checkFoldersOf(t, envs, clusterIDs, n, written)
}

// checkFoldersOf is checkFolders over the folders of the nodes ids.
func checkFoldersOf(t *testing.T, envs map[string]envVars, ids []string, n int, written map[string][]ack) {
	t.Helper()
	for _, id := range ids {
		st, err := store.Open(cluster.ShardDBPath(envs[id]["PROGRESSDB_DB_PATH"], n), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for tid, as := range written {
			var got []string
			for cursor := ""; ; {
				msgs, next, err := st.ListMessages(context.Background(), tid, store.ListOptions{Limit: store.MaxListLimit, Cursor: cursor})
				if err != nil {
					t.Fatalf("%s's replica of shard %d: %v", id, n, err)
				}
				for _, m := range msgs {
					var b string
					_ = json.Unmarshal(m.Body, &b)
					got = append(got, b)
				}
				if cursor = next; cursor == "" {
					break
				}
			}
			for _, a := range as {
				if c := countOf(got, a.body); c != 1 {
					t.Errorf("acknowledged write %s is %d times in %s's replica of shard %d", a.body, c, id, n)
				}
			}
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// checkOnce checks through every node that each write acknowledged on
// tid is there exactly once and that no write is there twice: a write
// whose answer was lost may be there, each attempt having a body of its
// own, but never twice.
func checkOnce(t testing.TB, nodes []*server, tid string, acks []ack) {
	t.Helper()
	for _, n := range nodes {
		got := messageBodies(t, n, tid)
		for _, a := range acks {
			if c := countOf(got, a.body); c != 1 {
				t.Fatalf("acknowledged write %s is %d times in %s through %s", a.body, c, tid, n.url)
			}
		}
		for _, b := range got {
			if c := countOf(got, b); c != 1 {
				t.Fatalf("write %s is %d times in %s through %s", b, c, tid, n.url)
			}
		}
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// TestFaultReplicatedLeaderCutOff runs three node processes created with
// three replicas per shard, each advertised (to the other nodes) through
// a TCP proxy the test controls. The proxy of the node leading shard 0
// is cut under a steady write load through every node: the other
// nodes' messages and calls no longer reach it, while its own still
// reach them. The cut-off leader acknowledges nothing it cannot commit;
// it steps down, the majority elects a leader of a later term and
// acknowledges writes through both its nodes, and writes through the
// cut-off node are forwarded to it and acknowledged again. After the
// cut heals every acknowledged write is there exactly once, through
// every node and in every replica's folder, and no write is there twice
// (a refused or failed one may be there once: its outcome was unknown).
func TestFaultReplicatedLeaderCutOff(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	direct := etcd.DirectClient(t)
	envs := clusterEnvs(t, strings.Join(etcd.Endpoints(), ","))
	nodes := make([]*server, len(clusterIDs))
	proxies := make([]*tcpproxy.Proxy, len(clusterIDs))
	for i, id := range clusterIDs {
		addr := freeAddr(t)
		p, err := tcpproxy.New(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		proxies[i] = p
		// The others reach it through its proxy; the test, directly.
		nodes[i] = &server{proc: start(t, envs[id].with("PROGRESSDB_ADDR", addr, "PROGRESSDB_ADVERTISE_URL", "https://"+p.Addr()), "serve"),
			url: "https://" + addr}
	}
	if p := runCLI(t, envs["node-1"].with("PROGRESSDB_ADVERTISE_URL", "https://127.0.0.1:1"), "cluster", "create",
		"--replicas", "3", "--nodes", strings.Join(clusterIDs, ",")); p.code != 0 {
		t.Fatalf("cluster create --replicas 3: %d\n%s", p.code, p.output())
	}
	for _, n := range nodes {
		waitNodeUp(t, n)
	}
	old := waitLeaderRecord(t, direct, 0, func(cluster.Leader) bool { return true })
	cut := slices.Index(clusterIDs, old.Node)
	// One writer through each node, the cut-off one first.
	var via []*server
	var tids []string
	for i := range nodes {
		via = append(via, nodes[(cut+i)%len(nodes)])
		tids = append(tids, threadInShard(0, i+1))
	}
	ld := startLoad(t, "cut", via, tids)
	waitFor(t, time.Minute, "writes acknowledged before the cut", func() bool { n, _ := ld.since(time.Time{}, 0); return n >= 20 })
	proxies[cut].Cut()
	cutAt := time.Now()
	next := waitLeaderRecord(t, direct, 0, func(l cluster.Leader) bool { return l.Term > old.Term && l.Node != old.Node })
	elected := time.Now()
	// The majority's nodes are acknowledged, and the cut-off node
	// forwards to the new leader: every writer is acknowledged again.
	ld.waitAcked(t, 20, elected, "writes acknowledged through every node after the election")
	proxies[cut].Heal()
	written := ld.end()
	// The partition figures: from the cut to the new leader's record,
	// and to the first write through the cut-off node, among those sent
	// after the cut, that was acknowledged.
	_, first := ld.since(cutAt, 0)
	_, refused := ld.counts()
	t.Logf("leader %s of shard 0 (term %d) cut off; %s leads in term %d, published %s after the cut; the first write through %s sent after the cut acknowledged %s after it; %d, %d and %d writes acknowledged through %s, %s and %s, %d refused or failed",
		old.Node, old.Term, next.Node, next.Term, elected.Sub(cutAt).Round(time.Millisecond), old.Node, first.Sub(cutAt).Round(time.Millisecond),
		len(written[tids[0]]), len(written[tids[1]]), len(written[tids[2]]), old.Node, clusterIDs[(cut+1)%3], clusterIDs[(cut+2)%3], refused)

	waitFor(t, time.Minute, "every replica of shard 0 to apply as far as the others", func() bool { return sameApplied(nodes, 0) })
	for tid, as := range written {
		checkOnce(t, nodes, tid, as)
	}
	for _, n := range nodes {
		if code := n.stop(t); code != 0 {
			t.Fatalf("node exit status %d after SIGTERM\n%s", code, n.output())
		}
	}
	checkFolders(t, envs, 0, written)
}
