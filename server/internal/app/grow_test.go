package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A running cluster of one replica per shard (owned shards, spec §11)
// grows to three replicas under writes through every node: each shard's
// home switches it into a group whose leader adds the others, every
// shard ends led with three healthy replicas (cluster status), no
// ownership key is left, a write refused meanwhile asked to be retried
// (503 or 421 with Retry-After), and every acknowledged write is there
// once through every node and in every replica's folder; the nodes
// restart on their folders as replicas. Then set-replicas 1 takes every
// shard down to a group of one, under writes again, losing none.
func TestSetReplicasGrowsAndShrinksARunningCluster(t *testing.T) {
	t.Parallel()
	etcd, nodes := startCluster(t, "node-a", "node-b", "node-c")
	ctx := context.Background()
	c := etcd.Client(t)
	k := cluster.Keys{Name: "chat"}
	threads := seedShards(t, nodes)

	w := startWrites(t, nodes, threads, "grow")
	setReplicas(t, c, k, 3)
	m := waitSets(t, c, k, 3)
	w.waitAcks(t, 3*len(nodes)) // writes go on once the shards are groups
	acks := w.stop(t)
	if resp, err := c.Get(ctx, "/chat/shards/", clientv3.WithPrefix(), clientv3.WithKeysOnly()); err != nil {
		t.Fatal(err)
	} else {
		for _, kv := range resp.Kvs {
			if strings.HasSuffix(string(kv.Key), "/owner") {
				t.Errorf("ownership key left after the switch: %s", kv.Key)
			}
		}
	}
	checkWrites(t, nodes, threads, acks)

	// Every replica's folder holds every acknowledged write of its shard.
	for _, n := range nodes {
		n.shutdown()
	}
	byID := nodesByID(nodes)
	for s, tid := range threads {
		for _, r := range m.Sets[s] {
			st, err := store.Open(cluster.ShardDBPath(filepath.Join(byID[r.Node].dir, "data"), s), store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			msgs, _, err := st.ListMessages(ctx, tid, store.ListOptions{Limit: store.MaxListLimit})
			if cerr := st.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatalf("%s's replica of shard %d: %v", r.Node, s, err)
			}
			var bodies []string
			for _, msg := range msgs {
				var b string
				_ = json.Unmarshal(msg.Body, &b)
				bodies = append(bodies, b)
			}
			checkOnceIn(t, fmt.Sprintf("%s's replica of shard %d", r.Node, s), bodies, acks[tid])
		}
	}
	for i, n := range nodes {
		nodes[i] = startNode(t, etcd, n.id, n.dir)
	}

	w = startWrites(t, nodes, threads, "shrink")
	setReplicas(t, c, k, 1)
	waitSets(t, c, k, 1)
	w.waitAcks(t, 3*len(nodes))
	for tid, bodies := range w.stop(t) {
		acks[tid] = append(acks[tid], bodies...)
	}
	checkWrites(t, nodes, threads, acks)
}

// setReplicas asks for r replicas per shard over the running nodes, as
// `cluster set-replicas` does.
func setReplicas(t *testing.T, c *clientv3.Client, k cluster.Keys, r int) {
	t.Helper()
	live, err := cluster.LiveNodes(context.Background(), c, k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.SetReplicas(context.Background(), c, k, r, live); err != nil {
		t.Fatal(err)
	}
}

// waitSets waits until every shard is a group of r replicas, none
// leaving, each led and none under-replicated in cluster status.
func waitSets(t *testing.T, c *clientv3.Client, k cluster.Keys, r int) cluster.Map {
	t.Helper()
	return waitMap(t, c, k, fmt.Sprintf("every shard a group of %d replicas", r), func(m cluster.Map) string {
		for n := range testShards {
			if !m.Grouped(n) || len(m.Sets[n]) != r || len(m.Desired(n)) != r {
				return fmt.Sprintf("shard %d's set: %+v", n, m.Sets)
			}
		}
		st, err := cluster.ReadStatus(context.Background(), c, k)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st.Shards {
			if s.UnderReplicated || s.State != cluster.ShardOwned || len(s.Replicas) != r {
				return fmt.Sprintf("shard %d's status: %+v", s.N, s)
			}
			for _, rs := range s.Replicas {
				if rs.Role != "leader" && rs.Role != "follower" {
					return fmt.Sprintf("shard %d's status: %+v", s.N, s)
				}
			}
		}
		return ""
	})
}

// waitMap reads the shard map until why finds nothing wrong with it
// (returns ""), and returns it; it fails with the last answer of why
// when that takes longer than 90 seconds.
func waitMap(t *testing.T, c *clientv3.Client, k cluster.Keys, what string, why func(cluster.Map) string) cluster.Map {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		m, err := cluster.ReadMap(context.Background(), c, k)
		if err != nil {
			t.Fatal(err)
		}
		w := why(m)
		if w == "" {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not seen: %s", what, w)
		}
	}
}

// writes appends messages through every node, one writer per node going
// round the threads, each message a body of its own. A write answered
// otherwise than 201 is not retried (its outcome may be unknown); it
// must be a 503 or 421 with Retry-After.
type writes struct {
	stopped chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	acks    map[string][]string // by thread
	count   int
	bad     []string
}

func startWrites(t *testing.T, nodes []*testNode, threads []string, tag string) *writes {
	t.Helper()
	w := &writes{stopped: make(chan struct{}), acks: map[string][]string{}}
	for _, n := range nodes {
		w.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-w.stopped:
					return
				case <-time.After(20 * time.Millisecond):
				}
				tid := threads[i%len(threads)]
				body := fmt.Sprintf("%s-%s-%05d", tag, n.id, i)
				w.one(n, tid, body)
			}
		})
	}
	return w
}

func (w *writes) one(n *testNode, tid, body string) {
	data, _ := json.Marshal(map[string]string{"author": "a", "body": body})
	resp, err := http.Post(n.url()+"/v1/threads/"+tid+"/messages", "application/json", bytes.NewReader(data))
	if err != nil {
		return // a node stopping: its outcome is unknown
	}
	defer resp.Body.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case resp.StatusCode == http.StatusCreated:
		w.acks[tid] = append(w.acks[tid], body)
		w.count++
	case (resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusMisdirectedRequest) &&
		resp.Header.Get("Retry-After") != "":
	default:
		b := new(bytes.Buffer)
		_, _ = b.ReadFrom(resp.Body)
		w.bad = append(w.bad, fmt.Sprintf("%s through %s: %d %s", body, n.id, resp.StatusCode, b))
	}
}

// waitAcks waits for more acknowledged writes from now on.
func (w *writes) waitAcks(t *testing.T, more int) {
	t.Helper()
	w.mu.Lock()
	want := w.count + more
	w.mu.Unlock()
	waitFor(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.count >= want
	}, fmt.Sprintf("%d more acknowledged writes", more))
}

// stop stops the writers and returns the acknowledged writes by thread.
func (w *writes) stop(t *testing.T) map[string][]string {
	t.Helper()
	close(w.stopped)
	w.wg.Wait()
	for _, b := range w.bad {
		t.Errorf("a write answered neither 201 nor a retry: %s", b)
	}
	return w.acks
}

// checkWrites reads every thread through every node: each acknowledged
// write is there once, and no write twice.
func checkWrites(t *testing.T, nodes []*testNode, threads []string, acks map[string][]string) {
	t.Helper()
	for _, n := range nodes {
		for _, tid := range threads {
			var bodies []string
			cursor := ""
			for {
				code, body := call(t, http.MethodGet, n.url()+"/v1/threads/"+tid+"/messages?limit=1000&cursor="+url.QueryEscape(cursor), "", nil)
				var page struct {
					Messages []struct {
						Body json.RawMessage `json:"body"`
					} `json:"messages"`
					NextCursor string `json:"next_cursor"`
				}
				if code != http.StatusOK || json.Unmarshal(body, &page) != nil {
					t.Fatalf("read %s through %s: %d %s", tid, n.id, code, body)
				}
				for _, m := range page.Messages {
					var b string
					_ = json.Unmarshal(m.Body, &b)
					bodies = append(bodies, b)
				}
				if cursor = page.NextCursor; cursor == "" {
					break
				}
			}
			checkOnceIn(t, tid+" through "+n.id, bodies, acks[tid])
		}
	}
}

// checkOnceIn checks that each acknowledged write is in bodies once and
// that no body is there twice.
func checkOnceIn(t *testing.T, where string, bodies, acked []string) {
	t.Helper()
	seen := map[string]int{}
	for _, b := range bodies {
		seen[b]++
	}
	for _, a := range acked {
		if seen[a] != 1 {
			t.Fatalf("acknowledged write %s is %d times in %s", a, seen[a], where)
		}
	}
	for b, c := range seen {
		if c > 1 {
			t.Fatalf("write %s is %d times in %s", b, c, where)
		}
	}
}
