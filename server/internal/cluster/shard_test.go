package cluster

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// TestShardAttachmentsURL: each shard's attachments are a folder of their
// own in a file:// store and a prefix of their own in a bucket, after the
// URL's own prefix; a URL config refuses is refused.
func TestShardAttachmentsURL(t *testing.T) {
	for _, tt := range []struct{ url, want, dir string }{
		{"file:///var/lib/pdb-attachments", "file:///var/lib/pdb-attachments/shards/7", "/var/lib/pdb-attachments/shards/7"},
		{"s3://chat-files?region=eu-west-1", "s3://chat-files?prefix=shards%2F7%2F&region=eu-west-1", ""},
		{"gs://chat-files?prefix=prod/", "gs://chat-files?prefix=prod%2Fshards%2F7%2F", ""},
	} {
		got, err := ShardAttachmentsURL(tt.url, 7)
		if err != nil || got != tt.want {
			t.Errorf("ShardAttachmentsURL(%q, 7) = %q, %v; want %q", tt.url, got, err, tt.want)
		}
		if dir := ShardAttachmentsDir(tt.url, 7); dir != filepath.FromSlash(tt.dir) {
			t.Errorf("ShardAttachmentsDir(%q, 7) = %q, want %q", tt.url, dir, tt.dir)
		}
	}
	if _, err := ShardAttachmentsURL("ftp://files", 7); !errors.Is(err, config.ErrInvalidAttachmentsURL) {
		t.Errorf("an unknown scheme: %v", err)
	}
}

// TestShardOf pins the shard function: FNV-1a 64 of the thread ID, mod the
// number of shards. Changing it would strand every thread in a cluster.
func TestShardOf(t *testing.T) {
	tests := []struct {
		tid    string
		shards int
		want   int
	}{
		// FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c; of "foobar" 0x85944171f73967e8.
		{"a", 16, 0xaf63dc4c8601ec8c % 16},
		{"a", 7, int(uint64(0xaf63dc4c8601ec8c) % 7)},
		{"foobar", 16, 0x85944171f73967e8 % 16},
		{"foobar", 1000, int(uint64(0x85944171f73967e8) % 1000)},
		{"anything", 1, 0},
	}
	for _, tt := range tests {
		if got := ShardOf(tt.tid, tt.shards); got != tt.want {
			t.Errorf("ShardOf(%q, %d) = %d, want %d", tt.tid, tt.shards, got, tt.want)
		}
	}
	// Threads spread over every shard.
	seen := make(map[int]bool)
	for i := range 1000 {
		seen[ShardOf("thread-"+string(rune('a'+i%26))+string(rune('a'+i/26)), 16)] = true
	}
	if len(seen) != 16 {
		t.Fatalf("1000 threads landed in %d of 16 shards", len(seen))
	}
}

func TestShardPaths(t *testing.T) {
	if got, want := ShardDBPath("/srv/data", 3), filepath.Join("/srv/data", "shards", "3"); got != want {
		t.Errorf("ShardDBPath = %q, want %q", got, want)
	}
	if got, want := ShardAuditPath("/srv/audit", 12), filepath.Join("/srv/audit", "shards", "12"); got != want {
		t.Errorf("ShardAuditPath = %q, want %q", got, want)
	}
	if got := (Keys{Name: "chat"}).ShardOwner(5); got != "/chat/shards/5/owner" {
		t.Errorf("ShardOwner = %q", got)
	}
}

// TestRecordShards: the first node fixes the number of shards; a node
// started with the same number joins, one with another is refused, and a
// second cluster name in the same etcd has its own.
func TestRecordShards(t *testing.T) {
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	k := Keys{Name: "chat"}
	if err := RecordShards(ctx, c, k, 16); err != nil {
		t.Fatalf("first node: %v", err)
	}
	if err := RecordShards(ctx, c, k, 16); err != nil {
		t.Fatalf("same count: %v", err)
	}
	err := RecordShards(ctx, c, k, 32)
	var sce *ShardCountError
	if !errors.Is(err, ErrShardCount) || !errors.As(err, &sce) || sce.Recorded != 16 || sce.Asked != 32 {
		t.Fatalf("other count = %v, want a ShardCountError 16 vs 32", err)
	}
	if err := RecordShards(ctx, c, Keys{Name: "other"}, 32); err != nil {
		t.Fatalf("another cluster: %v", err)
	}
}
