package app

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A database's blob store: the default folder follows the database
// folder it is asked for; a store the operator named is kept, except
// that a restored copy never gets the original's folder.
func TestBlobsURLs(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "db")
	def, err := config.Load([]string{config.VarDBPath + "=" + db})
	if err != nil {
		t.Fatal(err)
	}
	named, err := config.Load([]string{config.VarDBPath + "=" + db, config.VarAttachmentsURL + "=file://" + filepath.Join(dir, "files")})
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := config.Load([]string{config.VarDBPath + "=" + db, config.VarAttachmentsURL + "=s3://b?region=x"})
	if err != nil {
		t.Fatal(err)
	}
	shard := filepath.Join(db, "shards", "3")
	copyDB := filepath.Join(dir, "copy")
	for _, c := range []struct {
		name string
		got  func() (string, error)
		want string
	}{
		{"default, the database", func() (string, error) { return BlobsURL(def, db) }, "file://" + db + "-attachments"},
		// A shard's own folder or prefix within the node's store, never
		// inside DB_PATH.
		{"default, a shard", func() (string, error) { return BlobsURL(def, shard) }, "file://" + db + "-attachments/shards/3"},
		{"named, a shard", func() (string, error) { return BlobsURL(named, shard) }, "file://" + filepath.Join(dir, "files", "shards", "3")},
		{"bucket, a shard", func() (string, error) { return BlobsURL(bucket, shard) }, "s3://b?prefix=shards%2F3%2F&region=x"},
		{"a shard's own config", func() (string, error) { return BlobsURL(shardConfig(named, 3), shard) }, "file://" + filepath.Join(dir, "files", "shards", "3")},
		{"copy of a folder", func() (string, error) { return CopyBlobsURL(named, copyDB, "") }, "file://" + copyDB + "-attachments"},
		{"copy into a folder given", func() (string, error) { return CopyBlobsURL(named, copyDB, filepath.Join(dir, "x")) }, "file://" + filepath.Join(dir, "x")},
		{"copy of a bucket", func() (string, error) { return CopyBlobsURL(bucket, copyDB, "") }, "s3://b?region=x"},
	} {
		got, err := c.got()
		if err != nil || got != c.want {
			t.Errorf("%s: %q %v, want %q", c.name, got, err, c.want)
		}
	}
}

// A retention service needs the blob store: one built without it would
// leave every owed blob deletion waiting.
func TestNewRetentionNeedsBlobs(t *testing.T) {
	db := filepath.Join(t.TempDir(), "db")
	cfg, err := config.Load([]string{config.VarDBPath + "=" + db})
	if err != nil {
		t.Fatal(err)
	}
	sts, err := OpenStores(context.Background(), cfg, nil, store.Options{}, KeepPlain)
	if err != nil {
		t.Fatal(err)
	}
	defer sts.Close()
	if _, err := NewRetention(Stores{Store: sts.Store}, cfg.Retention, nil, nil, false, nil); err == nil {
		t.Fatal("a retention service without its blob store was built")
	}
	svc, err := NewRetention(sts, cfg.Retention, nil, nil, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc.Close()
}
