package api_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/retention"
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
// holds is backed up (written or streamed) and listed with its shard; no
// shard is 400, a shard held elsewhere 409. Every answer is checked
// against api/openapi.yaml.
func TestClusterBackupsConformance(t *testing.T) {
	a, _ := startTwoNodes(t, etcdtest.Start(t))
	admin := headers(true, nil)
	send(t, a, "POST", "/v1/threads", `{"id":"`+threadIn(0, 2, "ta")+`","title":"x","author":"u"}`, nil, 201)
	var m backup.Manifest
	if err := json.Unmarshal(send(t, a, "POST", "/admin/backups?shard=0", "", admin, 201), &m); err != nil || m.Threads != 1 {
		t.Fatalf("shard 0's manifest: %+v %v", m, err)
	}
	send(t, a, "POST", "/admin/backups/stream?shard=0", "", admin, 200)
	send(t, a, "POST", "/admin/backups", "", admin, 400)
	send(t, a, "POST", "/admin/backups?shard=1", "", admin, 409)
	send(t, a, "POST", "/admin/backups/stream", "", admin, 400)
	send(t, a, "POST", "/admin/backups/stream?shard=1", "", admin, 409)
	var l backup.Listing
	if err := json.Unmarshal(send(t, a, "GET", "/admin/backups", "", admin, 200), &l); err != nil ||
		len(l.Backups) != 1 || l.Backups[0].Shard == nil || *l.Backups[0].Shard != 0 || l.Backups[0].BackupID != m.BackupID {
		t.Fatalf("listing: %+v %v", l, err)
	}
}
