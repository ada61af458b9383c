package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/buildinfo"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// shardBackups makes the backups of the shards a cluster node holds, each
// a backup of the shard's own database against its own audit trail (spec
// §10 per shard, §11), into <BACKUP_PATH>/shards/<n>/, with a scheduler
// per shard when PROGRESSDB_BACKUP_PATH is set. Shards come and go with
// moves.
type shardBackups struct {
	ctx    context.Context // the node's: schedulers run until it ends
	cfg    config.Config
	key    []byte
	logger *slog.Logger

	mu        sync.Mutex
	shards    map[int]shardBackup
	closed    bool
	wg        sync.WaitGroup     // the sweep of shards not held
	stopSweep context.CancelFunc // nil: no sweep
}

type shardBackup struct {
	creator *backup.Creator
	sched   *backup.Scheduler // nil: not scheduled
}

var _ api.ShardBackups = (*shardBackups)(nil)

func newShardBackups(ctx context.Context, cfg config.Config, key []byte, logger *slog.Logger) *shardBackups {
	return &shardBackups{ctx: ctx, cfg: cfg, key: key, logger: logger, shards: make(map[int]shardBackup)}
}

// add makes shard n's creator over its store and blob store (nil:
// none), held by hold (its retention service, and on a replicated
// shard its group's apply too), and starts its scheduler.
func (b *shardBackups) add(n int, st *store.Store, blobs *attachments.Blobs, hold backup.Holder, metrics *backup.Metrics) error {
	path := ""
	if b.cfg.Backup.Path != "" {
		path = cluster.ShardBackupPath(b.cfg.Backup.Path, n)
	}
	c, err := backup.NewCreator(backup.Options{Store: st, KeyStore: backup.KeyStoreOf(st), Blobs: blobs, Hold: hold, SigningKey: b.key, Version: buildinfo.Read().Version,
		Path: path, AuditPath: cluster.ShardAuditPath(b.cfg.Retention.AuditPath, n), Keep: b.cfg.Backup.Keep,
		Logger: b.logger.With("shard", n), Metrics: metrics})
	if err != nil {
		return fmt.Errorf("shard %d: %w", n, err)
	}
	sb := shardBackup{creator: c}
	if path != "" {
		sb.sched, err = backup.NewScheduler(backup.SchedulerOptions{Creator: c, Spec: b.cfg.Backup.Schedule,
			Keep: b.cfg.Backup.Keep, Logger: b.logger.With("shard", n)})
		if err != nil {
			return fmt.Errorf("shard %d: %w", n, err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	if old, ok := b.shards[n]; ok && old.sched != nil {
		old.sched.Stop()
	}
	b.shards[n] = sb
	if sb.sched != nil {
		sb.sched.Start(b.ctx)
	}
	return nil
}

// remove stops shard n's scheduler (a backup being written is cancelled)
// and forgets the shard; its backups stay in its folder.
func (b *shardBackups) remove(n int) {
	b.mu.Lock()
	sb, ok := b.shards[n]
	delete(b.shards, n)
	b.mu.Unlock()
	if ok && sb.sched != nil {
		sb.sched.Stop()
	}
}

// sweepEvery is how often a node expires the backups of the shards it
// no longer holds (moved away): their schedulers stopped with the move,
// and without the sweep their purged content would outlive BACKUP_KEEP.
const sweepEvery = time.Hour

// startSweep expires, now and every sweepEvery until the node's context
// ends, the backups older than BACKUP_KEEP in the folders under
// <BACKUP_PATH>/shards/ of shards this node does not hold. A held shard's
// scheduler expires its own.
func (b *shardBackups) startSweep() {
	if b.cfg.Backup.Path == "" {
		return
	}
	b.sweep()
	ctx, cancel := context.WithCancel(b.ctx)
	b.mu.Lock()
	b.stopSweep = cancel
	b.mu.Unlock()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		t := time.NewTicker(sweepEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				b.sweep()
			}
		}
	}()
}

func (b *shardBackups) sweep() {
	root := filepath.Join(b.cfg.Backup.Path, "shards")
	dirs, err := os.ReadDir(root)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			b.logger.Error("backup_expire_failed", "path", root, "err", err)
		}
		return
	}
	held := b.Held()
	for _, d := range dirs {
		n, err := strconv.Atoi(d.Name())
		if err != nil || !d.IsDir() || strconv.Itoa(n) != d.Name() || slices.Contains(held, n) {
			continue
		}
		dir := cluster.ShardBackupPath(b.cfg.Backup.Path, n)
		if _, err := backup.Expire(dir, b.cfg.Backup.Keep, time.Now(), b.logger.With("shard", n)); err != nil {
			b.logger.Error("backup_expire_failed", "shard", n, "path", dir, "err", err)
		}
	}
}

// close stops every scheduler and the sweep; it is called before the
// retention services and the stores close, since a backup holds both.
func (b *shardBackups) close() {
	b.mu.Lock()
	b.closed = true
	var scheds []*backup.Scheduler
	for _, sb := range b.shards {
		if sb.sched != nil {
			scheds = append(scheds, sb.sched)
		}
	}
	b.shards = map[int]shardBackup{}
	stop := b.stopSweep
	b.mu.Unlock()
	if stop != nil {
		stop()
	}
	for _, s := range scheds {
		s.Stop()
	}
	b.wg.Wait()
}

// Shard implements api.ShardBackups: shard n's backups, when this node
// holds it.
func (b *shardBackups) Shard(n int) (api.Backups, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sb, ok := b.shards[n]
	if !ok {
		return nil, false
	}
	return sb.creator, true
}

// Held implements api.ShardBackups: the shards this node backs up.
func (b *shardBackups) Held() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Sorted(maps.Keys(b.shards))
}

// List implements api.ShardBackups: every shard's backups under
// BACKUP_PATH (backup.ErrNoBackupPath when unset).
func (b *shardBackups) List(ctx context.Context) (backup.Listing, error) {
	if b.cfg.Backup.Path == "" {
		return backup.Listing{}, backup.ErrNoBackupPath
	}
	if err := ctx.Err(); err != nil {
		return backup.Listing{}, err
	}
	return cluster.ListBackups(b.cfg.Backup.Path, b.cfg.Retention.AuditPath, b.cfg.Backup.Keep, time.Now())
}
