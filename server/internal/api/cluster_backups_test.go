package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/router"
)

// shardBackups backs up the test node's shards as serve does: one creator
// per shard, into <path>/shards/<n>/, against the shard's audit folder.
type shardBackups struct {
	shards      *cluster.Shards
	service     func(n int) *retention.Manager
	path, audit string
}

func (b *shardBackups) Shard(n int) (api.Backups, bool) {
	st, ok := b.shards.Store(n)
	svc := b.service(n)
	if !ok || svc == nil {
		return nil, false
	}
	c, err := backup.NewCreator(backup.Options{Store: st, Hold: svc, Version: "test", Path: cluster.ShardBackupPath(b.path, n),
		AuditPath: cluster.ShardAuditPath(b.audit, n), Keep: 24 * time.Hour})
	if err != nil {
		return nil, false
	}
	return c, true
}

func (b *shardBackups) Held() []int { return b.shards.Numbers() }

func (b *shardBackups) List(ctx context.Context) (backup.Listing, error) {
	return cluster.ListBackups(b.path, b.audit, 24*time.Hour, time.Now())
}

// The backup routes on a cluster node work per shard: a shard the node
// holds is backed up (written or streamed) and listed with its shard; a
// shard held elsewhere is backed up by its owner, to which the node
// forwards the request (before: 409); a node's call about a shard the
// called node does not hold is misdirected (421), never forwarded on; no
// shard is 400. A cluster node has no one database: GET /admin/database
// is 404, while a thread's admin answer, served here or forwarded, names
// the thread's shard's database. Every answer is checked against
// api/openapi.yaml.
func TestClusterBackupsConformance(t *testing.T) {
	a, b := startTwoNodes(t, etcdtest.Start(t))
	admin := headers(true, nil)
	ta, tb := threadIn(0, 2, "ta"), threadIn(1, 2, "tb")
	send(t, a, "POST", "/v1/threads", `{"id":"`+ta+`","title":"x","author":"u"}`, nil, 201)
	for _, id := range []string{tb, tb + "2"} {
		send(t, a, "POST", "/v1/threads", `{"id":"`+id+`","title":"x","author":"u"}`, nil, 201)
	}
	var m backup.Manifest
	if err := json.Unmarshal(send(t, a, "POST", "/admin/backups?shard=0", "", admin, 201), &m); err != nil || m.Threads != 1 {
		t.Fatalf("shard 0's manifest: %+v %v", m, err)
	}
	send(t, a, "POST", "/admin/backups/stream?shard=0", "", admin, 200)
	send(t, a, "POST", "/admin/backups", "", admin, 400)
	var m1 backup.Manifest
	if err := json.Unmarshal(send(t, a, "POST", "/admin/backups?shard=1", "", admin, 201), &m1); err != nil || m1.Threads != 2 {
		t.Fatalf("shard 1's manifest through node-a: %+v %v", m1, err)
	}
	if streamed := send(t, a, "POST", "/admin/backups/stream?shard=1", "", admin, 200); len(streamed) == 0 {
		t.Fatal("shard 1's archive through node-a is empty")
	}
	send(t, a, "POST", "/admin/backups/stream", "", admin, 400)
	epoch, err := b.owner.Epoch(1)
	if err != nil {
		t.Fatal(err)
	}
	node := headers(true, http.Header{router.HeaderSecret: {secret}, router.HeaderEpoch: {fmt.Sprint(epoch)}, router.HeaderNode: {"node-b"}})
	send(t, a, "POST", "/admin/backups?shard=1", "", node, 421)
	send(t, a, "POST", "/admin/backups/stream?shard=1", "", node, 421)

	var l backup.Listing
	if err := json.Unmarshal(send(t, a, "GET", "/admin/backups", "", admin, 200), &l); err != nil ||
		len(l.Backups) != 1 || l.Backups[0].Shard == nil || *l.Backups[0].Shard != 0 || l.Backups[0].BackupID != m.BackupID {
		t.Fatalf("listing: %+v %v", l, err)
	}

	send(t, a, "GET", "/admin/database", "", admin, 404)
	ids := map[string]bool{}
	for _, tid := range []string{ta, tb} {
		req, err := http.NewRequest("GET", a.srv.URL+"/admin/threads/"+tid, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = admin.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		id := resp.Header.Get(api.HeaderDatabaseID)
		if resp.StatusCode != 200 || id == "" {
			t.Fatalf("thread %s through node-a: %d, %s %q", tid, resp.StatusCode, api.HeaderDatabaseID, id)
		}
		ids[id] = true
	}
	if len(ids) != 2 {
		t.Fatalf("threads of two shards named one database: %v", ids)
	}
}
