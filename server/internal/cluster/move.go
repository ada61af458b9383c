package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/retention"
)

// Moving a shard (spec §11). The shard's home and owner fences it (its
// writes answer 503 and its database refuses every batch of the epoch it
// was written under), backs it up with the backup package while no
// retention run purges, and the target restores that copy into
// <DB_PATH>/shards/<n> with the shard's audit trail and replays the purges
// the trail records after the copy's head. Then one etcd transaction
// changes the shard's home in the map and creates the target's ownership,
// whose epoch (the transaction's revision) is larger than any before, and
// the old owner deletes its copy and records the move in its trail.
//
// Every write the old owner acknowledged was committed before its fence
// went up, so it is in the copy; every later one is refused. Nothing
// purged comes back: the copy reflects every run up to its head, and the
// replay repeats any purge the trail records after it.

// MoveSource is the node a shard moves from: its home and owner.
type MoveSource interface {
	// Fence stops the shard's writes and raises its database's fence to
	// fence, so that no batch of the owner's epoch commits any more; it
	// holds retention runs until Remove or Abort.
	Fence(ctx context.Context, n int, fence int64) error
	// Backup writes the shard's backup (spec §10) to w.
	Backup(ctx context.Context, n int, w io.Writer) (backup.Manifest, error)
	// Trail writes the shard's sealed audit files to w, as a tar stream.
	Trail(ctx context.Context, n int, w io.Writer) error
	// Release gives the shard's ownership up, for the hand-over.
	Release(ctx context.Context, n int) error
	// Remove deletes the shard's copy once the target owns it, and
	// records in the shard's audit trail that it moved to node to.
	Remove(ctx context.Context, n int, to string, epoch int64) error
	// Abort undoes Fence and Release: the node takes the shard up again
	// with a new epoch and its writes go on.
	Abort(ctx context.Context, n int) error
}

// MoveTarget is the node a shard moves to.
type MoveTarget interface {
	// ReceiveTrail writes the shard's audit trail (Trail) into the
	// shard's audit folder, which must be absent or empty.
	ReceiveTrail(ctx context.Context, n int, r io.Reader) error
	// Restore restores the backup read from r into the shard's folder,
	// which must be absent or empty, and replays the purges the trail
	// records after the backup's head.
	Restore(ctx context.Context, n int, r io.Reader) (RestoreResult, error)
	// Take acquires the shard's ownership in a transaction that also
	// requires cmps and applies ops; it returns the new epoch.
	Take(ctx context.Context, n int, cmps []clientv3.Cmp, ops []clientv3.Op) (int64, error)
	// Discard removes what ReceiveTrail and Restore wrote, after a move
	// that did not hand over.
	Discard(ctx context.Context, n int) error
}

// RestoreResult is what a target restored and replayed.
type RestoreResult struct {
	Backup backup.Manifest  `json:"backup"`
	Replay retention.Result `json:"replay"`
}

// MoveResult describes a move.
type MoveResult struct {
	Shard     int    `json:"shard"`
	From      string `json:"from"`
	To        string `json:"to"`
	OldEpoch  int64  `json:"old_epoch"` // the fence raised on the old copy
	Epoch     int64  `json:"epoch"`     // the target's ownership
	BackupID  string `json:"backup_id"`
	Threads   int64  `json:"threads"`
	Messages  int64  `json:"messages"`
	Replayed  int64  `json:"replayed"` // purges repeated on the copy
	Removed   bool   `json:"removed"`  // the old copy is deleted
	RemoveErr string `json:"remove_error,omitempty"`
}

// Errors of a move.
var (
	ErrMoveInProgress = errors.New("a move of this shard is under way")
	ErrMoveTarget     = errors.New("invalid move target")
	ErrNodeDown       = errors.New("node not running")
)

// ShardMove is held while shard n is being moved: who moves it where.
// Its creation revision is the fence raised on the old copy.
func (k Keys) ShardMove(n int) string { return "/" + k.Name + "/shards/" + strconv.Itoa(n) + "/move" }

// moveValue is what the move key holds.
type moveValue struct {
	From      string    `json:"from"`
	To        string    `json:"to"`
	StartedAt time.Time `json:"started_at"`
}

// MoveOptions configure MoveShard.
type MoveOptions struct {
	Client *clientv3.Client
	Keys   Keys
	Shard  int
	To     string // the target's node ID
	Source MoveSource
	Target MoveTarget
	Logger *slog.Logger
	// TTL is the lease of the move's key (DefaultMoveTTL when below 1s).
	TTL time.Duration
}

// DefaultMoveTTL: a mover that stops renewing for this long is taken for
// dead, and the shard's home undoes or finishes the move.
const DefaultMoveTTL = 10 * time.Second

// MoveShard moves a shard from its home to node o.To. Until the hand-over
// any failure leaves the shard where it was (taken up again with a new
// epoch) and the target without it; after it, the move stands, and a
// failure to delete the old copy is reported in MoveResult.RemoveErr.
func MoveShard(ctx context.Context, o MoveOptions) (res MoveResult, err error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	n, k, c := o.Shard, o.Keys, o.Client
	res.Shard, res.To = n, o.To
	m, mapRev, err := checkMove(ctx, o)
	if n >= 0 && n < len(m.Homes) {
		res.From = m.Homes[n]
	}
	if err != nil {
		return res, err
	}

	// The move key, created only when none is there and the map is
	// unchanged, keeps two moves of a shard apart; its revision, newer
	// than the owner's epoch and older than the next, is the fence.
	mv, _ := json.Marshal(moveValue{From: res.From, To: o.To, StartedAt: time.Now().UTC()})
	moveKey := k.ShardMove(n)
	// The key lives under a lease this mover keeps alive: if it dies, the
	// key expires and the shard's home undoes (or finishes) the move.
	ttl := o.TTL
	if ttl < time.Second {
		ttl = DefaultMoveTTL
	}
	grant, err := c.Grant(ctx, int64((ttl+time.Second-1)/time.Second))
	if err != nil {
		return res, fmt.Errorf("move shard %d: %w", n, err)
	}
	kaCtx, stopKA := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		stopKA()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = c.Revoke(rctx, grant.ID)
	}()
	ka, err := c.KeepAlive(kaCtx, grant.ID)
	if err != nil {
		return res, fmt.Errorf("move shard %d: %w", n, err)
	}
	go func() {
		for range ka { // drained: the client renews on its own
		}
	}()
	tresp, err := c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(moveKey), "=", 0),
			clientv3.Compare(clientv3.ModRevision(k.ShardMap()), "=", mapRev)).
		Then(clientv3.OpPut(moveKey, string(mv), clientv3.WithLease(grant.ID))).
		Commit()
	if err != nil {
		return res, fmt.Errorf("move shard %d: %w", n, err)
	}
	if !tresp.Succeeded {
		return res, fmt.Errorf("move shard %d: %w (or the shard map changed meanwhile)", n, ErrMoveInProgress)
	}
	fence := tresp.Header.Revision
	res.OldEpoch = fence
	log.Info("cluster_shard_move_started", "shard", n, "from", res.From, "to", o.To, "fence", fence)

	restored := false
	defer func() {
		if err == nil {
			return
		}
		// Not handed over: the shard stays where it was.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		var errs []error
		if restored {
			errs = append(errs, o.Target.Discard(actx, n))
		}
		errs = append(errs, o.Source.Abort(actx, n))
		if _, derr := c.Txn(actx).If(clientv3.Compare(clientv3.CreateRevision(moveKey), "=", fence)).
			Then(clientv3.OpDelete(moveKey)).Commit(); derr != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", moveKey, derr))
		}
		if aerr := errors.Join(errs...); aerr != nil {
			err = fmt.Errorf("%w; undoing it: %w", err, aerr)
		}
		log.Error("cluster_shard_move_failed", "shard", n, "from", res.From, "to", o.To, "err", err)
	}()

	if err := o.Source.Fence(ctx, n, fence); err != nil {
		return res, fmt.Errorf("move shard %d: fence on %s: %w", n, res.From, err)
	}
	restored = true // from here the target may hold a part
	if err := pipe(ctx, func(w io.Writer) error { return o.Source.Trail(ctx, n, w) },
		func(r io.Reader) error { return o.Target.ReceiveTrail(ctx, n, r) }); err != nil {
		return res, fmt.Errorf("move shard %d: audit trail: %w", n, err)
	}
	var rr RestoreResult
	if err := pipe(ctx, func(w io.Writer) error {
		_, err := o.Source.Backup(ctx, n, w)
		return err
	}, func(r io.Reader) error {
		var err error
		rr, err = o.Target.Restore(ctx, n, r)
		return err
	}); err != nil {
		return res, fmt.Errorf("move shard %d: copy to %s: %w", n, o.To, err)
	}
	res.BackupID, res.Threads, res.Messages = rr.Backup.BackupID, rr.Backup.Threads, rr.Backup.Messages
	res.Replayed = rr.Replay.Purged

	if err := o.Source.Release(ctx, n); err != nil {
		return res, fmt.Errorf("move shard %d: release on %s: %w", n, res.From, err)
	}
	m.Homes[n] = o.To
	nm, err := json.Marshal(m)
	if err != nil {
		return res, fmt.Errorf("move shard %d: %w", n, err)
	}
	epoch, err := o.Target.Take(ctx, n,
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k.ShardMap()), "=", mapRev),
			clientv3.Compare(clientv3.CreateRevision(moveKey), "=", fence)},
		[]clientv3.Op{clientv3.OpPut(k.ShardMap(), string(nm)), clientv3.OpDelete(moveKey)})
	if err != nil {
		return res, fmt.Errorf("move shard %d: hand over to %s: %w", n, o.To, err)
	}
	res.Epoch = epoch
	log.Info("cluster_shard_handed_over", "shard", n, "from", res.From, "to", o.To, "epoch", epoch)

	// Handed over: the move stands whatever follows.
	if rerr := o.Source.Remove(context.WithoutCancel(ctx), n, o.To, epoch); rerr != nil {
		res.RemoveErr = rerr.Error()
		log.Error("cluster_shard_old_copy_not_removed", "shard", n, "node", res.From, "err", rerr)
	} else {
		res.Removed = true
	}
	return res, nil
}

// checkMove reads the shard map (and the revision the hand-over compares)
// and checks that the move can begin: the shard exists, the target is
// another node, and it is running (it restores the copy and takes it).
func checkMove(ctx context.Context, o MoveOptions) (Map, int64, error) {
	n, k, c := o.Shard, o.Keys, o.Client
	var m Map
	mresp, err := c.Get(ctx, k.ShardMap())
	if err != nil {
		return m, 0, fmt.Errorf("move shard %d: read shard map: %w", n, err)
	}
	if len(mresp.Kvs) == 0 {
		return m, 0, ErrNoCluster
	}
	if err := json.Unmarshal(mresp.Kvs[0].Value, &m); err != nil || len(m.Homes) != m.Shards {
		return m, 0, fmt.Errorf("move shard %d: %s is not a shard map", n, k.ShardMap())
	}
	if n < 0 || n >= m.Shards {
		return m, 0, fmt.Errorf("move shard %d: %w: the cluster has shards 0 to %d", n, ErrMoveTarget, m.Shards-1)
	}
	switch {
	case m.Grouped(n):
		// A replica moves as a membership change (design §8), not built.
		return m, 0, fmt.Errorf("move shard %d: %w: moving a replica is not built yet", n, ErrReplicated)
	case o.To == "":
		return m, 0, fmt.Errorf("move shard %d: %w: no node named", n, ErrMoveTarget)
	case o.To == m.Homes[n]:
		return m, 0, fmt.Errorf("move shard %d: %w: node %s holds it already", n, ErrMoveTarget, o.To)
	}
	if r, err := c.Get(ctx, k.Node(o.To), clientv3.WithCountOnly()); err != nil {
		return m, 0, fmt.Errorf("move shard %d: %w", n, err)
	} else if r.Count == 0 {
		return m, 0, fmt.Errorf("move shard %d: node %s: %w", n, o.To, ErrNodeDown)
	}
	return m, mresp.Kvs[0].ModRevision, nil
}

// pipe runs write and read at once over an in-memory pipe; an error on
// either side stops the other.
func pipe(ctx context.Context, write func(io.Writer) error, read func(io.Reader) error) error {
	pr, pw := io.Pipe()
	werr := make(chan error, 1)
	go func() {
		err := write(pw)
		pw.CloseWithError(err)
		werr <- err
	}()
	rerr := read(pr)
	if rerr == nil {
		// What the reader left (a tar stream's end padding) is drained,
		// so that the writer finishes.
		_, rerr = io.Copy(io.Discard, pr)
	}
	// A reader that stopped early must not leave the writer blocked.
	_ = pr.CloseWithError(errors.Join(rerr, errors.New("reader stopped")))
	err := <-werr
	if rerr != nil {
		return rerr
	}
	if err != nil {
		return err
	}
	return ctx.Err()
}
