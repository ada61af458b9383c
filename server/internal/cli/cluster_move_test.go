package cli

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
)

// cluster move-shard moves a shard between two running nodes through the
// node at PROGRESSDB_ADDR and prints what moved (exit 0); a move to the
// node that holds the shard is refused (exit 1), a missing --to is a usage
// error (exit 2).
func TestClusterMoveShardCommand(t *testing.T) {
	srv := etcdtest.Start(t)
	h := clusterHarness(t, srv, "PROGRESSDB_CLUSTER_SHARDS=2", "PROGRESSDB_ADMIN_TOKEN=adm",
		"PROGRESSDB_CLUSTER_LEASE_TTL=3s")
	reportHeld(t, srv, "node-1", "node-2")
	h.mustRun("cluster", "create", "--nodes", "node-1,node-2")
	node1 := serveNode(t, h)
	ask := &harness{t: t, dbPath: h.dbPath, environ: append(append([]string{}, h.environ...), node1...)}
	serveSecondNode(t, srv, h)
	tid := ""
	for i := 0; tid == ""; i++ {
		if id := "t" + strconv.Itoa(i); cluster.ShardOf(id, 2) == 0 {
			tid = id
		}
	}
	addr := strings.TrimPrefix(node1[0], "PROGRESSDB_ADDR=")
	res, err := http.Post("http://"+addr+"/v1/threads", "application/json", strings.NewReader(`{"id":"`+tid+`","title":"x","author":"u"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", res.StatusCode)
	}

	var moved cluster.MoveResult
	out := ask.mustRun("cluster", "move-shard", "0", "--to", "node-2", "--json")
	if err := json.Unmarshal([]byte(out), &moved); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if moved.Shard != 0 || moved.From != "node-1" || moved.To != "node-2" || !moved.Removed || moved.Threads != 1 {
		t.Fatalf("moved: %s", out)
	}
	if code, _, errOut := ask.run("cluster", "move-shard", "0", "--to", "node-2"); code != exitFailed ||
		!strings.Contains(errOut, "holds it already") {
		t.Errorf("a move to the node holding the shard: exit %d: %s", code, errOut)
	}
	if code, _, _ := ask.run("cluster", "move-shard", "1"); code != exitUsage {
		t.Errorf("without --to: exit %d, want %d", code, exitUsage)
	}
	res, err = http.Get("http://" + addr + "/v1/threads/" + tid)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("the thread after the move: %d", res.StatusCode)
	}
}
