package cluster

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A node's folder of a replica, on a real etcd and real stores: a new
// folder is claimed by its replica and its start marked; a folder
// recording another replica is deleted and starts empty; an empty folder
// of a replica that started before is lost (ErrReplicaLost): the replica
// is marked leaving and a new one with a new ID is added on the same
// node, which the set then names there and which starts; a lost replica
// that is leaving anyway changes nothing.
func TestReplicaFolderPrepare(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	k := Keys{Name: "chat"}
	m, _, err := EnsureReplicated(ctx, c, k, 2, 3, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(t.TempDir(), "data")
	shards, err := OpenShards(dbPath, []int{0}, store.Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer shards.Close()
	f := ReplicaFolder{Client: c, Keys: k, Node: "a", Shards: shards, Logger: slog.Default()}
	claimed := func(st *store.Store) uint64 {
		t.Helper()
		l, err := st.RaftLog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return l.Replica()
	}
	marked := func(id uint64) bool {
		t.Helper()
		resp, err := c.Get(ctx, k.ReplicaStarted(id))
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Kvs) == 1
	}

	r, _ := m.ReplicaOn(0, "a")
	st, err := f.Prepare(ctx, 0, r, false)
	if err != nil || claimed(st) != r.ID || !marked(r.ID) {
		t.Fatalf("a new folder: %v, claimed %d, marked %v", err, claimed(st), marked(r.ID))
	}
	if _, err := st.CreateThread(ctx, store.Thread{ID: "t1", Title: "x", Author: "u"}); err != nil {
		t.Fatal(err)
	}
	// Started again on its own folder: nothing changes.
	if st, err = f.Prepare(ctx, 0, r, false); err != nil || claimed(st) != r.ID {
		t.Fatalf("a restart: %v, claimed %d", err, claimed(st))
	}
	if _, err := st.GetThread(ctx, "t1"); err != nil {
		t.Fatalf("the thread after a restart: %v", err)
	}

	// The set names another replica here than the folder records.
	other := Replica{ID: r.ID + 1000, Node: "a", Added: true}
	if st, err = f.Prepare(ctx, 0, other, false); err != nil || claimed(st) != other.ID {
		t.Fatalf("a folder of another replica: %v, claimed %d", err, claimed(st))
	}
	if _, err := st.GetThread(ctx, "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the other replica's thread: %v, want it deleted", err)
	}

	// r's folder lost: empty, while r started before.
	if _, err := f.reset(0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Prepare(ctx, 0, r, false); !errors.Is(err, ErrReplicaLost) {
		t.Fatalf("a lost folder: %v, want ErrReplicaLost", err)
	}
	after, err := ReadMap(ctx, c, k)
	if err != nil {
		t.Fatal(err)
	}
	now, _ := after.ReplicaOn(0, "a")
	if len(after.Sets[0]) != 4 || len(after.Desired(0)) != 3 || now.ID == r.ID || now.Leaving || !now.Added || after.Homes[0] != "b" {
		t.Fatalf("shard 0's set after the loss: %+v, home %s", after.Sets[0], after.Homes[0])
	}
	if st, err = f.Prepare(ctx, 0, now, true); err != nil || claimed(st) != now.ID {
		t.Fatalf("the replacement: %v, claimed %d", err, claimed(st))
	}

	// The old replica, leaving, lost again: no second replacement.
	old := after.Sets[0][0]
	if old.ID != r.ID || !old.Leaving {
		t.Fatalf("the lost replica in the set: %+v", old)
	}
	if _, err := f.reset(0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Prepare(ctx, 0, old, false); !errors.Is(err, ErrReplicaLost) {
		t.Fatalf("a lost leaving replica: %v", err)
	}
	if again, err := ReadMap(ctx, c, k); err != nil || len(again.Sets[0]) != 4 {
		t.Fatalf("shard 0's set after the leaving one's loss: %+v %v", again.Sets[0], err)
	}
}
