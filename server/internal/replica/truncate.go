package replica

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// Log truncation and the erase after purges (docs/replication-design.md
// §4, §11). A replica drops its log on its own, from what it applied:
//   - up to every purge it applies, at once: the entries that wrote the
//     purged items are purged content too, so no slow follower keeps
//     them alive (it catches up by snapshot instead);
//   - to keep it bounded, once it holds more than twice LogKeep entries
//     behind the applied index, down to LogKeep of them (etcd keeps
//     5,000 for slow followers too), and only when the group can send
//     snapshots (GroupConfig.Folder): a follower further behind gets one;
//   - likewise once those entries' bytes pass LogMaxBytes (logbytes.go).
//
// After a purge the replica's erase step runs in the background, one at
// a time per group, covering the purged spans and the dropped entries.

// DefaultLogKeep is how many applied entries a replica keeps for slow
// followers when no purge asks for less (Config.LogKeep).
const DefaultLogKeep = 5000

// eraseRetry is the pause before an erase that failed is tried again.
const eraseRetry = time.Second

// snapshotDescriptor is what a snapshot point carries for raft to send
// (raftpb.Snapshot.Data): which group's state it stands for. The state
// itself travels as the backup stream (snapshot.go).
func snapshotDescriptor(group uint64) []byte {
	return fmt.Appendf(nil, "progressdb shard %d", group)
}

// truncate drops the log as the policy above says, after the Ready's
// committed entries were applied (the worker's, holding rnMu).
func (g *group) truncate(ctx context.Context) error {
	first, err := g.log.FirstIndex()
	if err != nil {
		return err
	}
	applied := g.log.Applied()
	purged, erased := g.log.Purges()
	to := uint64(0)
	if purged >= first {
		to = purged
	}
	if g.folder != nil && g.keep > 0 && applied-(first-1) > 2*g.keep {
		to = max(to, applied-g.keep)
	}
	if g.folder != nil && g.maxBytes > 0 {
		if err := g.bytes.sync(first, applied, g.log.EntrySizes); err != nil {
			return fmt.Errorf("the log's entry sizes: %w", err)
		}
		to = max(to, g.bytes.trimTo(g.maxBytes, func() uint64 { return slowestFollower(g.rn, g.replica) }))
	}
	if to != 0 {
		if err := g.log.Truncate(ctx, to, snapshotDescriptor(g.id)); err != nil {
			return fmt.Errorf("truncate the log to %d: %w", to, err)
		}
	}
	if purged > erased || !g.eraseChecked {
		g.eraseChecked = true
		g.kickErase(ctx, purged > erased)
	}
	return nil
}

// kickErase starts the group's eraser unless it runs; owed says a purge
// is known to be owed, else the store's own record decides (a restart
// after a purge whose erase did not complete).
func (g *group) kickErase(ctx context.Context, owed bool) {
	if !owed {
		ok, err := g.store().Erased(ctx)
		if err == nil && ok {
			// Nothing owed (a start, a snapshot of an erased state):
			// this replica's files hold no purge it applied.
			g.reportErase(g.raftLog().Applied())
			return
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.erasePending = true
	if g.erasing || g.bg == nil {
		return
	}
	g.erasing = true
	g.bg.Go(func() { g.eraseLoop(ctx) })
}

// eraseLoop erases until nothing applied is owed, retrying failures
// until ctx ends (the host stopped: the debt stays recorded in the
// store, and the next start erases in full).
func (g *group) eraseLoop(ctx context.Context) {
	for {
		g.mu.Lock()
		g.erasePending = false
		g.mu.Unlock()
		err := g.eraseOnce(ctx)
		if err != nil {
			g.logger.Warn("replica_erase_failed", slog.Uint64("group", g.id), slog.Uint64("replica", g.replica), slog.Any("err", err))
			select {
			case <-ctx.Done():
			case <-time.After(eraseRetry):
			}
		}
		g.mu.Lock()
		if ctx.Err() != nil || (err == nil && !g.erasePending) {
			g.erasing = false
			g.erasePending = g.erasePending || err != nil
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
	}
}

// eraseOnce runs the store's erase of what its applied purges removed,
// holding eraseMu so that a snapshot's install never closes the store
// under it.
func (g *group) eraseOnce(ctx context.Context) error {
	g.eraseMu.Lock()
	defer g.eraseMu.Unlock()
	st := g.store()
	// Every purge applied by now is covered once the store says erased.
	applied := g.raftLog().Applied()
	upTo, res, err := st.EraseApplied(ctx, store.EraseOptions{})
	if err != nil {
		return err
	}
	g.logger.Info("replica_erased", slog.Uint64("group", g.id), slog.Uint64("replica", g.replica),
		slog.Uint64("purge_index", upTo), slog.Bool("full", res.Full), slog.Int("ranges", res.Ranges))
	if ok, err := st.Erased(ctx); err != nil || !ok {
		g.mu.Lock()
		g.erasePending = true // a purge applied meanwhile
		g.mu.Unlock()
		return nil
	}
	g.reportErase(max(upTo, applied))
	return nil
}

// countBehindPurge sets behindPurge from the leader's view of its
// followers (the worker's, at the end of each pass).
func (g *group) countBehindPurge() {
	purged, _ := g.log.Purges()
	if purged == 0 || g.rn.BasicStatus().RaftState != raft.StateLeader {
		g.behindPurge.Store(0)
		return
	}
	n := int64(0)
	for id, pr := range g.rn.Status().Progress {
		if id != g.replica && pr.Match < purged {
			n++
		}
	}
	g.behindPurge.Store(n)
}

// owesErase reports whether the replica has applied a purge whose erase
// has not completed.
func (g *group) owesErase() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.erasePending || g.erasing
}

// ErasePending is the number of this host's replicas that applied a
// purge and have not yet erased it from their files: summed over the
// nodes, progressdb_cluster_erase_pending_replicas (design §11).
func (h *Host) ErasePending() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := 0
	for _, g := range h.groups {
		if g.owesErase() {
			n++
		}
	}
	return n
}
