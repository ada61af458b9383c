package faults

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster"
)

// clusterLeaseTTL is PROGRESSDB_CLUSTER_LEASE_TTL of clusterNodeEnv.
const clusterLeaseTTL = 3 * time.Second

// ackLog records the messages a cluster acknowledged, per thread.
type ackLog struct {
	mu   sync.Mutex
	msgs map[string][]string // thread → bodies answered 201
	last time.Time           // when the newest 201 arrived
}

func (a *ackLog) add(tid, body string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.msgs == nil {
		a.msgs = map[string][]string{}
	}
	a.msgs[tid] = append(a.msgs[tid], body)
	a.last = time.Now()
}

func (a *ackLog) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, m := range a.msgs {
		n += len(m)
	}
	return n
}

// appendMessage posts body to thread tid through base with a plain client
// (safe off the test's goroutine) and returns the status, 0 when the node
// did not answer.
func appendMessage(base, tid, body string) int {
	raw, _ := json.Marshal(map[string]string{"author": "a", "body": body})
	resp, err := httpClient.Post(base+"/v1/threads/"+tid+"/messages", "application/json", bytes.NewReader(raw))
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// checkAcknowledged checks that every acknowledged message of every
// thread reads back through n, in order, and nothing else.
func checkAcknowledged(t testing.TB, n *server, acks *ackLog) {
	t.Helper()
	acks.mu.Lock()
	defer acks.mu.Unlock()
	for tid, want := range acks.msgs {
		var page struct {
			Messages []struct {
				Body string `json:"body"`
			} `json:"messages"`
		}
		n.mustCall(t, "GET", "/v1/threads/"+tid+"/messages?limit=1000", nil, "", http.StatusOK, &page)
		var got []string
		for _, m := range page.Messages {
			got = append(got, m.Body)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("thread %s through %s: messages %v, acknowledged %v", tid, n.url, got, want)
		}
	}
}

// TestFaultClusterEtcdLost kills etcd (SIGKILL: quorum lost for every
// node at once) while a client writes through all three nodes. Once the
// lease TTL has passed, every write through every node answers 503 and
// none was acknowledged after it; each node goes on serving the reads of
// its shard; etcd restarted on its data, the nodes take their shards
// again with new epochs, writes resume, and every acknowledged write
// reads back through every node.
func TestFaultClusterEtcdLost(t *testing.T) {
	t.Parallel()
	for i := range pick(1, 3) {
		t.Run(fmt.Sprintf("trial_%d", i), func(t *testing.T) {
			rng := trialRand(t, i)
			etcd := startEtcd(t)
			envs := clusterEnvs(t, etcd.endpoints())
			nodes := startNodes(t, envs)
			epochs := map[int]int64{}
			for _, s := range clusterState(t, nodes[0]).Shards {
				epochs[s.N] = s.Epoch
			}

			// Two threads per shard; node i holds shard i.
			acks := &ackLog{}
			var tids []string
			for shard := range clusterShards {
				for j := range 2 {
					tid := threadInShard(shard, j)
					nodes[j].mustCall(t, "POST", "/v1/threads", map[string]string{"id": tid, "title": "t", "author": "a"}, "", http.StatusCreated, nil)
					tids = append(tids, tid)
				}
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					case <-time.After(10 * time.Millisecond):
					}
					tid, body := tids[k%len(tids)], fmt.Sprintf("m%04d", k)
					if appendMessage(nodes[k%len(nodes)].url, tid, body) == http.StatusCreated {
						acks.add(tid, body)
					}
				}
			}()
			// Lost after 10 to 29 acknowledged writes.
			before := 10 + rng.IntN(20)
			waitFor(t, time.Minute, "writes to be acknowledged", func() bool { return acks.count() >= before })

			etcd.kill()
			lost := time.Now()
			sleepUntil(lost.Add(clusterLeaseTTL))
			stopped := time.Now()
			for _, n := range nodes {
				for _, tid := range tids {
					if code := appendMessage(n.url, tid, "late"); code != http.StatusServiceUnavailable {
						t.Fatalf("a write through %s to %s a lease TTL after etcd was lost: %d, want 503", n.url, tid, code)
					}
				}
			}
			// Each node reads its own shard without etcd.
			sleepUntil(stopped.Add(500 * time.Millisecond)) // the writer's last tries
			close(stop)
			wg.Wait()
			if acks.last.After(stopped) {
				t.Fatalf("a write was acknowledged at %s, after every write had stopped", acks.last.Format(time.RFC3339Nano))
			}
			for shard, n := range nodes {
				for _, tid := range tids {
					if cluster.ShardOf(tid, clusterShards) != shard {
						continue
					}
					acks.mu.Lock()
					want := len(acks.msgs[tid])
					acks.mu.Unlock()
					var page struct {
						Messages []json.RawMessage `json:"messages"`
					}
					n.mustCall(t, "GET", "/v1/threads/"+tid+"/messages?limit=1000", nil, "", http.StatusOK, &page)
					if len(page.Messages) != want {
						t.Fatalf("thread %s through its node without etcd: %d messages, %d acknowledged", tid, len(page.Messages), want)
					}
				}
			}

			etcd.start(t)
			for j, n := range nodes {
				for _, tid := range tids {
					body := fmt.Sprintf("after-%d", j)
					waitFor(t, time.Minute, "writes through "+n.url+" to resume", func() bool {
						return appendMessage(n.url, tid, body) == http.StatusCreated
					})
					acks.add(tid, body)
				}
			}
			// etcd restores the old ownership keys with their leases, which
			// expire since nobody renews them; the nodes own their shards
			// again under new keys, so with new epochs.
			for _, s := range clusterState(t, nodes[0]).Shards {
				if s.State != cluster.ShardOwned || s.Epoch <= epochs[s.N] {
					t.Fatalf("shard %d once writes resumed: %+v, want owned with an epoch above %d", s.N, s, epochs[s.N])
				}
			}
			for _, n := range nodes {
				checkAcknowledged(t, n, acks)
			}
			for _, n := range nodes {
				if code := n.stop(t); code != 0 {
					t.Fatalf("node exit status %d after SIGTERM\n%s", code, n.output())
				}
			}
		})
	}
}
