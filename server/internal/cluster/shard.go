package cluster

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"path/filepath"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// ShardOf returns the shard of thread tid: fnv1a-64(tid) mod shards (spec
// §11). Every node computes it alike, so any node knows where a thread is.
func ShardOf(tid string, shards int) int {
	h := fnv.New64a()
	_, _ = h.Write([]byte(tid)) // never fails
	return int(h.Sum64() % uint64(shards))
}

// ShardDBPath is shard n's Pebble directory: <DB_PATH>/shards/<n>.
func ShardDBPath(dbPath string, n int) string {
	return filepath.Join(dbPath, "shards", strconv.Itoa(n))
}

// ShardOfDBPath reports which shard's folder dir is, when it is one of
// <dbPath>/shards/<n>.
func ShardOfDBPath(dbPath, dir string) (int, bool) {
	if filepath.Dir(filepath.Clean(dir)) != filepath.Join(dbPath, "shards") {
		return 0, false
	}
	base := filepath.Base(dir)
	n, err := strconv.Atoi(base)
	if err != nil || n < 0 || strconv.Itoa(n) != base {
		return 0, false
	}
	return n, true
}

// ShardKeystorePath is shard n's key store (spec §11.1):
// <KEYSTORE_PATH>/shards/<n>, held, backed up and moved with the shard.
func ShardKeystorePath(keystorePath string, n int) string {
	return filepath.Join(keystorePath, "shards", strconv.Itoa(n))
}

// ShardAttachmentsURL is shard n's attachments store within the node's
// PROGRESSDB_ATTACHMENTS_URL, so that a shard's blobs are listed, copied,
// moved and erased on their own: a file:// store's folder
// <folder>/shards/<n> (beside <KEYSTORE_PATH>/shards/<n>), a bucket's
// prefix shards/<n>/ (after the URL's own prefix, if any) in the one
// bucket every node uses. Errors wrap config.ErrInvalidAttachmentsURL.
func ShardAttachmentsURL(rawURL string, n int) (string, error) {
	scheme, dir, err := config.ParseAttachmentsURL(rawURL)
	if err != nil {
		return "", err
	}
	if scheme == "file" {
		return config.FileURL(filepath.Join(dir, "shards", strconv.Itoa(n)))
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("%w: %w", config.ErrInvalidAttachmentsURL, err)
	}
	q := u.Query()
	// gocloud.dev/blob opens the bucket through blob.PrefixedBucket.
	q.Set("prefix", q.Get("prefix")+"shards/"+strconv.Itoa(n)+"/")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// ShardAttachmentsDir is the folder of shard n's attachments when
// PROGRESSDB_ATTACHMENTS_URL is a file:// store, "" for a bucket (or a
// URL that does not parse): what moves with the shard.
func ShardAttachmentsDir(rawURL string, n int) string {
	scheme, dir, err := config.ParseAttachmentsURL(rawURL)
	if err != nil || scheme != "file" {
		return ""
	}
	return filepath.Join(dir, "shards", strconv.Itoa(n))
}

// ShardAuditPath is shard n's audit folder, with its own chain:
// <AUDIT_PATH>/shards/<n>, where audit verify looks for shards' chains.
func ShardAuditPath(auditPath string, n int) string {
	return filepath.Join(auditPath, audit.ShardsDir, strconv.Itoa(n))
}

// Keys names the cluster's keys in etcd, all under /<name>/, so several
// clusters can share one etcd.
type Keys struct{ Name string }

// ShardCount holds the number of shards, fixed when the cluster is created.
func (k Keys) ShardCount() string { return "/" + k.Name + "/shards/count" }

// ShardOwner is held, under its owner's etcd lease, by shard n's owner; its
// creation revision is the shard's epoch (EtcdCoordinator).
func (k Keys) ShardOwner(n int) string { return "/" + k.Name + "/shards/" + strconv.Itoa(n) + "/owner" }

// Node is held, under the node's etcd lease, by the live process of
// node id: registered while it runs, gone within a TTL once it dies.
func (k Keys) Node(id string) string { return "/" + k.Name + "/nodes/" + id }

// ErrShardCount refuses a node started with a number of shards other than
// the one the cluster was created with.
var ErrShardCount = errors.New("the cluster was created with another number of shards")

// ShardCountError is returned (wrapping ErrShardCount) with both numbers.
type ShardCountError struct{ Recorded, Asked int }

func (e *ShardCountError) Error() string {
	return fmt.Sprintf("the cluster was created with %d shards, this node was started with %d", e.Recorded, e.Asked)
}

func (e *ShardCountError) Unwrap() error { return ErrShardCount }

// RecordShards fixes the cluster's number of shards: the first node to
// start records shards, in one transaction so that two first nodes cannot
// both do it; every later node must have been started with the same
// number, or gets a *ShardCountError. Re-sharding would move every thread.
func RecordShards(ctx context.Context, c *clientv3.Client, k Keys, shards int) error {
	key := k.ShardCount()
	resp, err := c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, strconv.Itoa(shards))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("record shard count: %w", err)
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return fmt.Errorf("record shard count: %s vanished", key) // deleted meanwhile
	}
	recorded, err := strconv.Atoi(string(kvs[0].Value))
	if err != nil || recorded < 1 {
		return fmt.Errorf("record shard count: %s holds %q, not a number of shards", key, kvs[0].Value)
	}
	if recorded != shards {
		return &ShardCountError{Recorded: recorded, Asked: shards}
	}
	return nil
}
