package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A cluster node backs up each shard it holds as a database of its own:
// POST /admin/backups?shard=N writes one into <BACKUP_PATH>/shards/N/ and
// /stream?shard=N sends one, both verifying; a shard the node does not
// hold is backed up by its owner, to which the node forwards the request,
// a shard outside the map answers 503 and no shard 400. Scheduled backups write one per shard
// into the shard's folder, and GET /admin/backups lists every shard's with
// its shard.
func TestClusterBackupsPerShard(t *testing.T) {
	t.Parallel()
	_, nodes := startClusterWith(t, []string{"node-a", "node-b"}, "PROGRESSDB_BACKUP_CRON=@every 1s")
	a := nodes[0] // shards 0 and 2
	tid := threadIn(t, 2)
	if code, body := call(t, http.MethodPost, a.url()+"/v1/threads", fmt.Sprintf(`{"id":%q,"title":"x","author":"u"}`, tid), nil); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	code, body := call(t, http.MethodPost, a.url()+"/admin/backups?shard=2", "", adminAuth)
	var m backup.Manifest
	if code != http.StatusCreated || json.Unmarshal(body, &m) != nil || m.Threads != 1 {
		t.Fatalf("POST /admin/backups?shard=2: %d %s", code, body)
	}
	name := filepath.Join(a.dir, "backups", "shards", "2", backup.FileName(m.CreatedAt, m.BackupID))
	if rep, err := backup.Verify(context.Background(), name, nil, t.TempDir()); err != nil || !rep.Valid {
		t.Fatalf("shard 2's backup %s: %+v %v", name, rep, err)
	}

	code, body = call(t, http.MethodPost, a.url()+"/admin/backups/stream?shard=0", "", adminAuth)
	if code != http.StatusOK {
		t.Fatalf("stream shard 0: %d %s", code, body)
	}
	streamed := filepath.Join(t.TempDir(), "shard-0.tar")
	if err := os.WriteFile(streamed, body, 0o600); err != nil {
		t.Fatal(err)
	}
	if rep, err := backup.Verify(context.Background(), streamed, nil, t.TempDir()); err != nil || !rep.Valid || rep.Manifest.Threads != 0 {
		t.Fatalf("streamed shard 0: %+v %v", rep, err)
	}
	for url, want := range map[string]int{
		"/admin/backups":                http.StatusBadRequest,
		"/admin/backups?shard=1":        http.StatusCreated, // on node-b, its owner
		"/admin/backups/stream":         http.StatusBadRequest,
		"/admin/backups/stream?shard=x": http.StatusBadRequest,
		"/admin/backups/stream?shard=3": http.StatusOK,
		"/admin/backups/stream?shard=4": http.StatusServiceUnavailable, // not in the map
	} {
		if code, body := call(t, http.MethodPost, a.url()+url, "", adminAuth); code != want {
			t.Fatalf("POST %s: %d %.300s, want %d", url, code, body, want)
		}
	}

	// The schedule fires every second: each shard gets backups of its own.
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := call(t, http.MethodGet, a.url()+"/admin/backups", "", adminAuth)
		var l backup.Listing
		if code != http.StatusOK || json.Unmarshal(body, &l) != nil {
			t.Fatalf("GET /admin/backups: %d %s", code, body)
		}
		per := map[int]int{}
		for _, e := range l.Backups {
			if e.Shard == nil {
				t.Fatalf("entry without a shard: %s", body)
			}
			if _, err := os.Stat(filepath.Join(l.Path, e.File)); err != nil || filepath.Dir(e.File) != fmt.Sprintf("shards/%d", *e.Shard) {
				t.Fatalf("entry %s of shard %d: %v", e.File, *e.Shard, err)
			}
			per[*e.Shard]++
		}
		if per[1] != 0 || per[3] != 0 {
			t.Fatalf("node-a lists shards it does not hold: %s", body)
		}
		if per[0] >= 2 && per[2] >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scheduled backups of both shards: %s", body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type noHold struct{}

func (noHold) Hold(context.Context) (audit.Head, func(), error) { return audit.Head{}, func() {}, nil }

// The backups of a shard the node no longer holds (moved away) expire
// with BACKUP_KEEP too: the node sweeps their folders, so purged content
// in them does not outlive KEEP because the shard's scheduler stopped.
func TestClusterExpiresBackupsOfShardsMovedAway(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	folder := filepath.Join(dir, "backups", "shards", "1") // node-a holds 0 and 2
	st, err := store.Open(filepath.Join(t.TempDir(), "db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, age := range []time.Duration{48 * time.Hour, time.Hour} {
		c, err := backup.NewCreator(backup.Options{Store: st, Hold: noHold{}, Path: folder,
			Now: func() time.Time { return time.Now().Add(-age) }})
		if err != nil {
			t.Fatal(err)
		}
		_, file, err := c.CreateInPath(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, file)
	}
	st.Close()

	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.CreateCluster(ctx, etcd.Client(t), cluster.Keys{Name: "chat"}, testShards, []string{"node-a", "node-b"}); err != nil {
		t.Fatal(err)
	}
	startNodeWith(t, etcd, "node-a", dir, "PROGRESSDB_RETENTION_AUDIT_PATH="+filepath.Join(dir, "audit"),
		"PROGRESSDB_BACKUP_PATH="+filepath.Join(dir, "backups"), "PROGRESSDB_BACKUP_KEEP=1d")
	if _, err := os.Stat(files[0]); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("backup older than KEEP of a shard not held: %v", err)
	}
	if _, err := os.Stat(files[1]); err != nil {
		t.Fatalf("backup within KEEP of a shard not held: %v", err)
	}
}
