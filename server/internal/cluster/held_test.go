package cluster

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// DiskShards lists the shard databases a node's disk holds, with their
// identities: a folder that is not empty and named by a shard number;
// an empty folder, another name or a file are not shards, and a copy
// whose restore did not finish is held all the same (with the identity
// its marker names), since no command serves it but it is the shard's.
func TestDiskShards(t *testing.T) {
	ctx := context.Background()
	db := t.TempDir()
	if got, err := DiskShards(ctx, db); err != nil || len(got) != 0 {
		t.Fatalf("no shards folder: %v %v", got, err)
	}
	ids := map[int]string{}
	for _, n := range []int{3, 0} {
		st, err := store.Open(ShardDBPath(db, n), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if ids[n], err = st.DatabaseID(ctx, false); err != nil || ids[n] == "" {
			t.Fatalf("shard %d's identity %q: %v", n, ids[n], err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{"1", "07", "incoming-2"} {
		if err := os.MkdirAll(filepath.Join(db, "shards", dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(db, "shards", "07", "x"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(db, "shards", "5"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	unfinished := ShardDBPath(db, 4)
	if err := os.MkdirAll(unfinished, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := store.WriteRestoreState(unfinished, store.RestoreState{State: store.RestoreReplaying, DatabaseID: "copy-4"}); err != nil {
		t.Fatal(err)
	}
	got, err := DiskShards(ctx, db)
	want := []HeldShard{{Shard: 0, DatabaseID: ids[0]}, {Shard: 3, DatabaseID: ids[3]},
		{Shard: 4, DatabaseID: "copy-4", UnfinishedRestore: true}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("DiskShards = %+v, %v; want %+v", got, err, want)
	}
}
