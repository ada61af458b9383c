package replica

import (
	"context"
	"fmt"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// HoldApply holds the group's worker (nothing applied, saved or stepped)
// until release is called, so that a backup of st, the group's store on
// this host, stands at one applied index, with its key store: the
// leader's scheduled backups of a replicated shard are taken as its
// snapshots are (applyHold). ErrNoGroup; ErrSnapshotRefused (wrapped)
// when a snapshot replaced st. Hold it briefly: the replica answers no
// message meanwhile, and a leader held too long loses its followers.
func (h *Host) HoldApply(ctx context.Context, groupID uint64, st *store.Store) (release func(), err error) {
	g := h.group(groupID)
	if g == nil {
		return nil, fmt.Errorf("group %d: %w", groupID, ErrNoGroup)
	}
	_, release, err = (&applyHold{g: g, st: st}).Hold(ctx)
	if err != nil {
		if release != nil {
			release()
		}
		return nil, fmt.Errorf("group %d: %w", groupID, err)
	}
	return release, nil
}
