package app

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
)

// TestClusterNodeWithoutShards: a node started after the cluster was
// created, under a new ID, holds no shard and answers every request by
// forwarding it (docs/cluster.md, adding a node).
func TestClusterNodeWithoutShards(t *testing.T) {
	etcd, nodes := startCluster(t, "node-a", "node-b")
	extra := startNode(t, etcd, "node-c", t.TempDir())
	for i := range 4 {
		id := fmt.Sprintf("added-%d", i)
		if code, body := call(t, http.MethodPost, extra.url()+"/v1/threads", fmt.Sprintf(`{"id":%q,"title":"x","author":"u"}`, id), nil); code != http.StatusCreated {
			t.Fatalf("create %s through the added node: %d %s", id, code, body)
		}
		for _, n := range append(nodes, extra) {
			if code, body := call(t, http.MethodGet, n.url()+"/v1/threads/"+id, "", nil); code != http.StatusOK || !bytes.Contains(body, []byte(id)) {
				t.Fatalf("read %s through %s: %d %s", id, n.id, code, body)
			}
		}
	}
	st := waitOwned(t, etcd, testShards)
	for _, n := range st.Nodes {
		if n.ID == "node-c" && (!n.Alive || len(n.Shards) != 0) {
			t.Fatalf("added node in the status: %+v", n)
		}
	}
}
