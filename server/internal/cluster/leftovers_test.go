package cluster

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// A node's folders of the shards of a replicated map, on real stores:
// only those of a group whose set names no replica on the node (shard 2)
// go, its database folder with what a snapshot left beside it, its key
// store and its file:// blob folder, each logged once; its audit folder
// stays. The shards the node holds a replica of (shard 0), even a
// leaving one (shard 1), an owned shard without a set (shard 3) and one
// the caller keeps (shard 4, still being retired) are not touched, and
// a second pass finds nothing to do.
func TestLeftoversDeletesOnlyDroppedGroupsFolders(t *testing.T) {
	root := t.TempDir()
	var logs bytes.Buffer
	l := Leftovers{DBPath: filepath.Join(root, "data"), KeystorePath: filepath.Join(root, "keys"),
		AttachmentsURL: "file://" + filepath.Join(root, "blobs"), Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	other := []Replica{{ID: 1, Node: "b"}, {ID: 2, Node: "c"}, {ID: 3, Node: "d"}}
	m := Map{Shards: 5, Homes: []string{"a", "b", "b", "a", "b"}, Replicas: 3, Sets: [][]Replica{
		{{ID: 4, Node: "a"}, {ID: 5, Node: "b"}, {ID: 6, Node: "c"}},
		{{ID: 7, Node: "b"}, {ID: 8, Node: "a", Leaving: true}, {ID: 9, Node: "c"}, {ID: 10, Node: "d", Added: true}},
		other, nil, other}}
	audit := filepath.Join(root, "audit")
	shardOf := map[string]int{} // every folder made, and its shard
	for n := range m.Shards {
		db := ShardDBPath(l.DBPath, n)
		st, err := store.Open(db, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		dirs := []string{db + ".snapshot", ShardKeystorePath(l.KeystorePath, n), ShardAttachmentsDir(l.AttachmentsURL, n),
			ShardAuditPath(audit, n)}
		for _, d := range dirs {
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		for _, d := range append(dirs, db) {
			shardOf[d] = n
		}
	}
	if got := m.Dropped("a"); len(got) != 2 || got[0] != 2 || got[1] != 4 {
		t.Fatalf("Dropped: %v, want [2 4]", got)
	}
	keep := func(n int) bool { return n == 4 }
	if err := l.Delete(m, "a", keep); err != nil {
		t.Fatal(err)
	}
	for d, n := range shardOf {
		_, err := os.Stat(d)
		gone := n == 2 && d != ShardAuditPath(audit, n)
		if gone != os.IsNotExist(err) {
			t.Errorf("%s: gone %v, want %v (%v)", d, !gone, gone, err)
		}
	}
	if got := strings.Count(logs.String(), "replica_folder_deleted"); got != 3 {
		t.Errorf("%d deletions logged, want 3:\n%s", got, logs.String())
	}
	if err := l.Delete(m, "a", keep); err != nil || strings.Count(logs.String(), "replica_folder_deleted") != 3 {
		t.Errorf("second pass: %v\n%s", err, logs.String())
	}
	// No replicated shard: nothing is dropped.
	if got := (Map{Shards: 2, Homes: []string{"b", "b"}}).Dropped("a"); len(got) != 0 {
		t.Errorf("Dropped of an unreplicated map: %v", got)
	}
}
