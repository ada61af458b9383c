package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/durable"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A node's part in moves as their target (MoveTarget): what it receives,
// restores and takes, and what it discards when a move fails.
func (nd *Node) incoming(n int) *incoming {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	in := nd.in[n]
	if in == nil {
		in = &incoming{}
		nd.in[n] = in
	}
	return in
}

// ReceiveTrail implements MoveTarget.
func (nd *Node) ReceiveTrail(ctx context.Context, n int, r io.Reader) error {
	root := nd.auditPath(n)
	if err := backup.CheckEmpty(root); err != nil {
		if !errors.Is(err, backup.ErrNotEmpty) {
			return fmt.Errorf("shard %d: audit folder: %w", n, err)
		}
		// The shard comes back to a node that held it: its trail here ends
		// with the record of its move away, which the trail coming in
		// does not hold. It is set aside whole, never deleted, and the
		// shard's trail goes on from the one coming in.
		aside := root + ".before-" + time.Now().UTC().Format("20060102T150405.000000000Z")
		if err := os.Rename(root, aside); err != nil {
			return fmt.Errorf("shard %d: set the older audit trail aside: %w", n, err)
		}
		if err := durable.SyncDir(filepath.Dir(root)); err != nil {
			return err
		}
		nd.incoming(n).aside = aside
		nd.o.Logger.Info("cluster_shard_trail_set_aside", "shard", n, "folder", aside)
	}
	nd.incoming(n).trail = true
	// Unpacked beside the folder and renamed into place: a crash leaves
	// a staged copy, which the next move here or Discard deletes, never
	// a part of a trail under the shard's folder.
	staged := root + receivingSuffix
	if err := os.RemoveAll(staged); err != nil {
		return fmt.Errorf("shard %d: audit trail: %w", n, err)
	}
	if err := os.Remove(root); err != nil && !errors.Is(err, fs.ErrNotExist) { // empty, checked above
		return fmt.Errorf("shard %d: audit folder: %w", n, err)
	}
	if err := os.MkdirAll(filepath.Dir(root), 0o750); err != nil {
		return err
	}
	if err := audit.ReadTrail(ctx, r, staged); err != nil {
		return fmt.Errorf("shard %d: audit trail: %w", n, err)
	}
	if err := os.Rename(staged, root); err != nil {
		return fmt.Errorf("shard %d: audit trail: %w", n, err)
	}
	return durable.SyncDir(filepath.Dir(root))
}

// receivingSuffix names the folder beside a shard's audit folder that
// ReceiveTrail unpacks the trail into.
const receivingSuffix = ".receiving"

// Restore implements MoveTarget: the backup is written beside the
// shards and restored as the shard by backup.Restore, keeping its
// identity: verified while unpacked, opened among the node's shards, and
// the purges its trail records after the backup's head replayed (trigger
// "restore") before the shard is taken.
func (nd *Node) Restore(ctx context.Context, n int, r io.Reader) (RestoreResult, error) {
	var rr RestoreResult
	dir := nd.dbPath(n)
	if err := backup.CheckEmpty(dir); err != nil {
		return rr, fmt.Errorf("shard %d: %w", n, err)
	}
	ks := nd.keysPath(n)
	if ks != "" {
		if err := backup.CheckEmpty(ks); err != nil {
			return rr, fmt.Errorf("shard %d: key store: %w", n, err)
		}
		nd.incoming(n).keys = true
	}
	bp := nd.blobsPath(n)
	if bp != "" {
		// Its blobs (a file:// store) go into the shard's folder, which
		// must hold none: not another node's (one folder shared by two
		// nodes), not a copy left by a move away that failed to delete.
		if err := backup.CheckEmpty(bp); err != nil {
			return rr, fmt.Errorf("shard %d: attachments: %w", n, err)
		}
		nd.incoming(n).blobs = true
	}
	nd.incoming(n).db = true
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return rr, err
	}
	tmp := filepath.Join(filepath.Dir(dir), ".move-"+strconv.Itoa(n)+".tar")
	defer os.Remove(tmp)
	if err := backup.WriteAtomic(tmp, func(w io.Writer) error {
		_, err := io.Copy(w, r)
		return err
	}); err != nil {
		return rr, fmt.Errorf("shard %d: receive backup: %w", n, err)
	}
	rc := nd.o.Retention
	rc.AuditPath = nd.auditPath(n)
	res, err := backup.Restore(ctx, backup.RestoreOptions{File: tmp, DB: dir, KeepIdentity: true, Retention: rc, DefaultKeyStore: ks,
		Attachments: bp,
		PublicKey:   nd.publicKey(), Logger: nd.o.Logger.With("shard", n),
		Open: func() (*store.Store, error) { return nd.o.Shards.Open(n) },
		NewReplayer: func(st *store.Store, rc config.Retention) (backup.Replayer, error) {
			shard := n
			// The replay deletes the blobs of what was purged since the
			// backup, in the shard's store opened with it.
			b, _ := nd.o.Shards.Blobs(n)
			blobs := RetentionBlobs(b, st)
			runner, err := retention.NewRunner(retention.RunnerOptions{Store: st, Config: rc, Logger: nd.o.Logger.With("shard", n),
				Version: nd.o.Version, SigningKey: nd.o.SigningKey, Coordinator: copyCoordinator{owner: nd.o.Node}, Shard: &shard,
				Blobs: blobs})
			return shardReplay{runner}, err
		}})
	if res.Backup != nil {
		rr.Backup = *res.Backup
	}
	if res.Replay != nil {
		rr.Replay = *res.Replay
	}
	if len(res.Problems) > 0 {
		return rr, fmt.Errorf("shard %d: %w: %s", n, err, strings.Join(res.Problems, "; "))
	}
	if err != nil {
		return rr, fmt.Errorf("shard %d: %w", n, err)
	}
	return rr, nil
}

// shardReplay is a shard's runner as the replay of its move's restore:
// the replay ends with the move's context, and there is no service to
// close.
type shardReplay struct{ *retention.Runner }

func (shardReplay) Close() {}

// Take implements MoveTarget.
func (nd *Node) Take(ctx context.Context, n int, cmps []clientv3.Cmp, ops []clientv3.Op) (int64, error) {
	epoch, err := nd.o.Owner.Take(ctx, n, cmps, ops)
	if err != nil {
		return 0, err
	}
	nd.mu.Lock()
	delete(nd.in, n)
	nd.mu.Unlock()
	if nd.o.Attach != nil {
		nd.o.Attach(n)
	}
	if nd.o.Held != nil {
		nd.o.Held()
	}
	return epoch, nil
}

// Discard implements MoveTarget: only what this move created goes.
func (nd *Node) Discard(_ context.Context, n int) error {
	nd.mu.Lock()
	in := nd.in[n]
	delete(nd.in, n)
	nd.mu.Unlock()
	if in == nil {
		return nil
	}
	var errs []error
	if in.db {
		if _, err := nd.o.Shards.Detach(n); err != nil {
			errs = append(errs, err)
		}
		errs = append(errs, os.RemoveAll(nd.dbPath(n)))
	}
	if in.keys {
		// Closed with the shard above.
		errs = append(errs, os.RemoveAll(nd.keysPath(n)))
	}
	if in.blobs {
		errs = append(errs, os.RemoveAll(nd.blobsPath(n)))
	}
	if in.trail {
		// A copy of the old owner's trail, which keeps its own.
		errs = append(errs, os.RemoveAll(nd.auditPath(n)), os.RemoveAll(nd.auditPath(n)+receivingSuffix))
	}
	if in.aside != "" {
		errs = append(errs, os.Rename(in.aside, nd.auditPath(n)))
	}
	return errors.Join(errs...)
}
