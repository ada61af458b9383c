package cluster

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/durable"
)

// NodeOptions configure a node's part in moves.
type NodeOptions struct {
	Node   string
	Owner  *Owner
	Shards *Shards
	// Retention is the node's retention configuration; its AuditPath is
	// the root of the shards' trails (<AUDIT_PATH>/shards/<n>).
	Retention config.Retention
	// KeystorePath is the root of the shards' key stores
	// (<KEYSTORE_PATH>/shards/<n>, spec §11.1); "" when the node does not
	// seal. A sealed shard's key store moves with it.
	KeystorePath string
	// AttachmentsURL is the node's PROGRESSDB_ATTACHMENTS_URL: with a
	// file:// store a shard's folder of blobs (ShardAttachmentsDir) moves
	// with it; a bucket's prefix stays where every node reaches it.
	AttachmentsURL string
	SigningKey     ed25519.PrivateKey
	Version        string
	Logger         *slog.Logger
	// Holder returns shard n's retention runner (retention.Runner): a
	// shard moved away is held from its fence until its copy is deleted,
	// so no run purges or writes into its trail meanwhile.
	Holder func(n int) (backup.Holder, bool)
	// Detach, when set, is called before a shard moved away is closed
	// (its retention service stops); Attach once a shard moved here is
	// owned (its retention service starts).
	Detach, Attach func(n int)
	// Held, when set, is called once a shard moved away is deleted or one
	// moved here is taken: what the node holds on disk changed
	// (ReportHeld).
	Held func()
	// MoveGrace is how long a shard fenced for a move waits, once the
	// move's key is gone (the hand-over, an undo, or the lease of a mover
	// that died), for the mover to finish or undo the move before the
	// node does it itself (DefaultMoveGrace when 0).
	MoveGrace time.Duration
}

// DefaultMoveGrace: a live mover removes or undoes within milliseconds of
// deleting the move's key.
const DefaultMoveGrace = 30 * time.Second

// Node is one node's part in moves, as the source (MoveSource) of the
// shards it owns and the target (MoveTarget) of others.
type Node struct {
	o   NodeOptions
	mu  sync.Mutex
	out map[int]*outgoing // shards being moved away
	in  map[int]*incoming // shards being moved here
}

type outgoing struct {
	epoch   int64 // the ownership's epoch when fenced
	fence   int64 // the move key's creation revision
	head    audit.Head
	release func()        // lets retention runs go on
	done    chan struct{} // closed once Remove or Abort claims the move
}

// incoming is what a move here created: the trail, the database, and the
// folder the node's own older trail of the shard was set aside to.
type incoming struct {
	trail, db, keys, blobs bool
	aside                  string
}

var (
	_ MoveSource = (*Node)(nil)
	_ MoveTarget = (*Node)(nil)
)

// NewNode returns a node's part in moves.
func NewNode(o NodeOptions) (*Node, error) {
	if o.Owner == nil || o.Shards == nil || o.Holder == nil || o.Node == "" {
		return nil, errors.New("cluster node: a node, its owner, shards and retention runners are needed")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MoveGrace <= 0 {
		o.MoveGrace = DefaultMoveGrace
	}
	return &Node{o: o, out: make(map[int]*outgoing), in: make(map[int]*incoming)}, nil
}

func (nd *Node) auditPath(n int) string { return ShardAuditPath(nd.o.Retention.AuditPath, n) }
func (nd *Node) dbPath(n int) string    { return ShardDBPath(nd.o.Shards.DBPath(), n) }

// keysPath is shard n's key store folder, "" when the node does not seal.
func (nd *Node) keysPath(n int) string {
	if nd.o.KeystorePath == "" {
		return ""
	}
	return ShardKeystorePath(nd.o.KeystorePath, n)
}

// blobsPath is shard n's folder of attachments, "" when the node's
// store is a bucket (or it has none).
func (nd *Node) blobsPath(n int) string { return ShardAttachmentsDir(nd.o.AttachmentsURL, n) }

func (nd *Node) publicKey() ed25519.PublicKey {
	if nd.o.SigningKey == nil {
		return nil
	}
	pub, _ := nd.o.SigningKey.Public().(ed25519.PublicKey)
	return pub
}

func (nd *Node) outgoing(n int) (*outgoing, error) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	og := nd.out[n]
	if og == nil {
		return nil, fmt.Errorf("shard %d is not being moved from node %s", n, nd.o.Node)
	}
	return og, nil
}

// Fence implements MoveSource: writes stop (ErrMoving), running purges
// end and no run starts, and the database refuses every batch older than
// fence. A write acknowledged before Fence returns is in the copy.
func (nd *Node) Fence(ctx context.Context, n int, fence int64) error {
	st, ok := nd.o.Shards.Store(n)
	if !ok {
		return fmt.Errorf("shard %d: node %s does not hold it", n, nd.o.Node)
	}
	epoch, err := nd.o.Owner.Epoch(n)
	if err != nil {
		return err
	}
	holder, ok := nd.o.Holder(n)
	if !ok {
		return fmt.Errorf("shard %d: no retention runner", n)
	}
	nd.mu.Lock()
	if nd.out[n] != nil {
		nd.mu.Unlock()
		return fmt.Errorf("shard %d: %w", n, ErrMoveInProgress)
	}
	og := &outgoing{epoch: epoch, fence: fence, release: func() {}, done: make(chan struct{})}
	nd.out[n] = og
	nd.mu.Unlock()
	nd.o.Owner.Freeze(n)
	go nd.watchMove(n, og)
	// A run purging now ends before the copy is taken.
	head, release, err := holder.Hold(ctx)
	if err != nil {
		return fmt.Errorf("shard %d: hold retention: %w", n, err)
	}
	nd.mu.Lock()
	select {
	case <-og.done: // undone meanwhile
		nd.mu.Unlock()
		release()
		return fmt.Errorf("shard %d: the move was undone", n)
	default:
		og.head, og.release = head, release
	}
	nd.mu.Unlock()
	// Writes that took the epoch before the freeze commit before the
	// raise or are refused after it.
	if err := st.RaiseFence(ctx, fence); err != nil {
		return fmt.Errorf("shard %d: raise fence: %w", n, err)
	}
	nd.o.Logger.Info("cluster_shard_fenced", "shard", n, "epoch", epoch, "fence", fence)
	return nil
}

// heldHolder hands the backup creator the hold the move keeps already.
type heldHolder struct{ head audit.Head }

func (h heldHolder) Hold(context.Context) (audit.Head, func(), error) { return h.head, func() {}, nil }

// Backup implements MoveSource with the backup package's creator.
func (nd *Node) Backup(ctx context.Context, n int, w io.Writer) (backup.Manifest, error) {
	og, err := nd.outgoing(n)
	if err != nil {
		return backup.Manifest{}, err
	}
	nd.mu.Lock()
	head := og.head
	nd.mu.Unlock()
	st, ok := nd.o.Shards.Store(n)
	if !ok {
		return backup.Manifest{}, fmt.Errorf("shard %d: node %s does not hold it", n, nd.o.Node)
	}
	// A sealed shard's stream carries its key store (wrapped keys only),
	// and a file:// store's blobs of the shard (as stored).
	blobs, _ := nd.o.Shards.Blobs(n)
	c, err := backup.NewCreator(backup.Options{Store: st, KeyStore: backup.KeyStoreOf(st), Blobs: blobs, Hold: heldHolder{head},
		SigningKey: nd.o.SigningKey, Version: nd.o.Version, Logger: nd.o.Logger.With("shard", n)})
	if err != nil {
		return backup.Manifest{}, err
	}
	return c.Write(ctx, w, false)
}

// Trail implements MoveSource: the sealed files of the shard's audit
// folder, as audit.ReadTrail unpacks them.
func (nd *Node) Trail(ctx context.Context, n int, w io.Writer) error {
	if _, err := nd.outgoing(n); err != nil {
		return err
	}
	c, err := audit.CopySealedTrail(nd.auditPath(n))
	if err != nil {
		return fmt.Errorf("shard %d: audit trail: %w", n, err)
	}
	defer c.Close()
	if err := c.Write(ctx, w); err != nil {
		return fmt.Errorf("shard %d: audit trail: %w", n, err)
	}
	return nil
}

// Release implements MoveSource.
func (nd *Node) Release(_ context.Context, n int) error {
	if _, err := nd.outgoing(n); err != nil {
		return err
	}
	nd.o.Owner.Drop(n)
	return nil
}

// Remove implements MoveSource: the shard's retention stops, its store
// closes and its folder is deleted, all between the header and the footer
// of a record in the shard's trail (trigger "move", moved_to).
func (nd *Node) Remove(ctx context.Context, n int, to string, epoch int64) error {
	og := nd.claim(n)
	if og == nil {
		return fmt.Errorf("shard %d is not being moved from node %s", n, nd.o.Node)
	}
	defer func() {
		nd.o.Owner.Thaw(n)
		nd.releaseOf(og)()
	}()
	if nd.o.Detach != nil {
		nd.o.Detach(n)
	}
	var dbID string
	if st, ok := nd.o.Shards.Store(n); ok {
		dbID, _ = st.DatabaseID(ctx, false)
	}
	if _, err := nd.o.Shards.Detach(n); err != nil {
		return err
	}
	start := time.Now().UTC()
	host, _ := os.Hostname()
	shard := n
	h := audit.Header{StartedAt: start, Period: config.FormatDuration(nd.o.Retention.Period),
		MessagePeriod: config.FormatDuration(nd.o.Retention.MessagePeriod), Cutoff: start,
		Owner: nd.o.Node, Host: host, PID: os.Getpid(), Epoch: og.epoch, Version: nd.o.Version,
		BatchSize: nd.o.Retention.BatchSize, DatabaseID: dbID, Trigger: audit.TriggerMove, Shard: &shard, MovedTo: to}
	// The header is durable before anything is deleted.
	w, err := audit.CreateWith(nd.auditPath(n), newRunID(), h, audit.Options{SigningKey: nd.o.SigningKey})
	if err != nil {
		return fmt.Errorf("shard %d: record the move: %w", n, err)
	}
	dir := nd.dbPath(n)
	erase := time.Now()
	derr := removeFolder(dir)
	if ks := nd.keysPath(n); derr == nil && ks != "" {
		// No key of the shard is left in any file of this node's key
		// store folder (spec §11.1): the new owner holds them now.
		derr = removeFolder(ks)
	}
	if bp := nd.blobsPath(n); derr == nil && bp != "" {
		// Nor any of its attachments: the new owner's folder has them.
		derr = removeFolder(bp)
	}
	f := w.Counts()
	f.FinishedAt = time.Now().UTC()
	f.DurationMS = time.Since(start).Milliseconds()
	f.EraseMS = time.Since(erase).Milliseconds()
	if derr != nil {
		f.Status, f.Reason = audit.RunFailed, fmt.Sprintf("shard %d moved to node %s (epoch %d); deleting this copy failed: %v", n, to, epoch, derr)
	} else {
		f.Status, f.Erased = audit.RunCompleted, true
		f.Reason = fmt.Sprintf("shard %d moved to node %s (epoch %d); this copy was deleted", n, to, epoch)
	}
	if nd.o.Held != nil {
		nd.o.Held()
	}
	if _, err := w.Close(f); err != nil {
		return errors.Join(derr, fmt.Errorf("shard %d: record the move: %w", n, err))
	}
	if derr != nil {
		return fmt.Errorf("shard %d: delete %s: %w", n, dir, derr)
	}
	nd.o.Logger.Info("cluster_shard_moved_away", "shard", n, "to", to, "epoch", epoch, "audit_file", w.Path())
	return nil
}

// removeFolder deletes dir, durably: its parent is synced (when there is
// one: a shard never sealed has no key store folder).
func removeFolder(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := durable.SyncDir(filepath.Dir(dir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Abort implements MoveSource: the node takes the shard up again, with
// an epoch above the fence, and lets writes and runs go on.
func (nd *Node) Abort(_ context.Context, n int) error {
	og := nd.claim(n)
	if og == nil {
		return nil // never fenced, or undone already
	}
	nd.o.Owner.Drop(n)
	nd.o.Owner.Thaw(n)
	nd.o.Owner.Keep(n)
	nd.releaseOf(og)()
	nd.o.Logger.Info("cluster_shard_move_undone", "shard", n)
	return nil
}

// releaseOf reads og's release, which Fence sets once it holds the runs.
func (nd *Node) releaseOf(og *outgoing) func() {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return og.release
}

// claim takes shard n's move for Remove or Abort, once.
func (nd *Node) claim(n int) *outgoing {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	og := nd.out[n]
	if og != nil {
		delete(nd.out, n)
		close(og.done)
	}
	return og
}

// watchMove finishes a move its mover left: once the move's key is gone
// and the mover has neither removed nor undone the move within the grace,
// the node removes its copy when the map names another home for the shard
// (handed over), and takes the shard up again otherwise. The key lives
// under the mover's lease, so a mover that dies lets it expire.
func (nd *Node) watchMove(n int, og *outgoing) {
	w := nd.o.Owner
	c, key := w.o.Client, w.o.Keys.ShardMove(n)
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	go func() {
		select {
		case <-og.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	retry := max(w.o.TTL/3, 100*time.Millisecond)
	for !nd.moveKeyGone(ctx, c, key, og.fence) {
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(nd.o.MoveGrace):
	}
	for ctx.Err() == nil {
		m, err := ReadMap(ctx, c, w.o.Keys)
		if err == nil && n < m.Shards {
			if m.Homes[n] == nd.o.Node {
				nd.o.Logger.Warn("cluster_shard_move_abandoned", "shard", n, "action", "undo")
				_ = nd.Abort(ctx, n)
				return
			}
			var epoch int64
			if r, err := c.Get(ctx, w.o.Keys.ShardOwner(n)); err == nil && len(r.Kvs) > 0 {
				epoch = r.Kvs[0].CreateRevision
			}
			nd.o.Logger.Warn("cluster_shard_move_abandoned", "shard", n, "action", "remove", "to", m.Homes[n])
			if err := nd.Remove(context.WithoutCancel(ctx), n, m.Homes[n], epoch); err != nil {
				nd.o.Logger.Error("cluster_shard_old_copy_not_removed", "shard", n, "err", err)
			}
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// moveKeyGone waits until the move's key (created at revision fence) is
// deleted, and reports whether it saw it gone; false when ctx ended or
// etcd failed (the caller asks again).
func (nd *Node) moveKeyGone(ctx context.Context, c *clientv3.Client, key string, fence int64) bool {
	resp, err := c.Get(ctx, key)
	if err != nil {
		return false
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != fence {
		return true
	}
	for wr := range c.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
		if wr.Err() != nil {
			return false
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return true
			}
		}
	}
	return false
}

// newRunID returns 12 lowercase hex characters, like a run's.
func newRunID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
