package replica

// Membership changes (docs/replication-design.md §8). The leader proposes
// one change at a time as a ConfChangeV2 of a single step (add a learner,
// promote a learner to voter, remove a replica), so raft applies it as a
// simple change: a joint configuration is entered only for changes of
// more than one voter, and raft leaves it on its own (the transition is
// automatic). Every replica saves the membership it applied with its
// index, and records a snapshot point there when it can send snapshots,
// so that a learner added by it is in the configuration of the snapshot
// it is sent (raft refuses a snapshot that does not name its recipient).
// A replica that applies its own removal stops, and its host closes its
// store and deletes its folder (retire).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/confchange"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/progressdb/progressdb/server/pkg/durable"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Errors of membership changes.
var (
	// ErrMembership refuses a change that does not apply to the group's
	// membership as its leader sees it (a learner added twice, a voter
	// promoted, the last voter removed).
	ErrMembership = errors.New("membership change refused")
	// ErrMembershipBusy: a change proposed by this leader is not applied
	// yet; raft takes one at a time.
	ErrMembershipBusy = errors.New("a membership change is under way")
	// ErrRemoved: this replica was removed from its group.
	ErrRemoved = errors.New("replica removed from its group")
)

// AddLearner adds replica to the group as a learner: it gets the log (or
// a snapshot) but neither votes nor counts for commits until promoted.
// The host of replica runs it with GroupConfig.Join. Only the leader
// proposes (store.ErrNotLeader on any other replica); it returns once
// the change is applied here.
func (h *Host) AddLearner(ctx context.Context, groupID, replica uint64) error {
	return h.changeMembership(ctx, groupID, raftpb.ConfChangeType_ConfChangeAddLearnerNode, replica)
}

// Promote makes learner replica a voter. The caller checks that it
// caught up first (GroupStatus: its lag), so that the group's quorum
// never waits on a replica still receiving the log.
func (h *Host) Promote(ctx context.Context, groupID, replica uint64) error {
	return h.changeMembership(ctx, groupID, raftpb.ConfChangeType_ConfChangeAddNode, replica)
}

// RemoveReplica removes replica, a voter or a learner, from the group.
// Removing the leader itself works (it steps down once the change is
// applied) but costs an election: TransferLeadership first avoids it.
func (h *Host) RemoveReplica(ctx context.Context, groupID, replica uint64) error {
	return h.changeMembership(ctx, groupID, raftpb.ConfChangeType_ConfChangeRemoveNode, replica)
}

// TransferLeadership asks the group's leader on this host to hand the
// leadership to voter to; it returns at once, and the caller watches
// the group's status for the outcome (raft gives up after an election
// timeout).
func (h *Host) TransferLeadership(groupID, to uint64) error {
	g := h.group(groupID)
	if g == nil {
		return fmt.Errorf("group %d: %w", groupID, ErrNoGroup)
	}
	if g.lease.Load() == 0 {
		return fmt.Errorf("group %d: %w: replica %d does not lead", groupID, store.ErrNotLeader, g.replica)
	}
	h.report(groupID, func(rn *raft.RawNode) { rn.TransferLeader(to) })
	return nil
}

// changeMembership proposes one change through the group's leader on
// this host and waits until it is applied here.
func (h *Host) changeMembership(ctx context.Context, groupID uint64, typ raftpb.ConfChangeType, replica uint64) error {
	g := h.group(groupID)
	if g == nil {
		return fmt.Errorf("group %d: %w", groupID, ErrNoGroup)
	}
	if replica == 0 {
		return fmt.Errorf("group %d: %w: replica ID 0", groupID, ErrMembership)
	}
	term := g.lease.Load()
	if term == 0 {
		return fmt.Errorf("group %d: %w: replica %d does not lead", groupID, store.ErrNotLeader, g.replica)
	}
	id := proposalID()
	cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(replica)}},
		Context: binary.BigEndian.AppendUint64(nil, id)}
	p := &proposal{id: id, term: term, conf: cc, done: make(chan error, 1), start: time.Now()}
	if !g.queue(p) {
		return fmt.Errorf("group %d: %w", groupID, ErrStopped)
	}
	h.sched.enqueue(groupID)
	select {
	case err := <-p.done:
		if err != nil {
			return fmt.Errorf("group %d: %s replica %d: %w", groupID, typ, replica, err)
		}
		h.cfg.Logger.Info("replica_membership_changed", slog.Uint64("group", groupID), slog.String("change", typ.String()),
			slog.Uint64("replica", replica), slog.Uint64("by", g.replica))
		return nil
	case <-ctx.Done():
		g.forget(id)
		return ctx.Err()
	}
}

// proposeConf hands a membership change to raft (the worker's, under
// the lease it was asked in): refused while another of this leader's is
// not applied, or when raft would not apply it to the membership as it
// stands (raft panics on an invalid change at apply).
func (g *group) proposeConf(p *proposal) {
	if g.confID != 0 {
		g.finish(p.id, ErrMembershipBusy)
		return
	}
	st := g.rn.Status()
	ch := p.conf.GetChanges()[0]
	id := ch.GetNodeId()
	_, member := st.Progress[id]
	learner := member && st.Progress[id].IsLearner
	switch ch.GetType() {
	case raftpb.ConfChangeType_ConfChangeAddLearnerNode:
		if member {
			g.finish(p.id, fmt.Errorf("%w: replica %d is a member already", ErrMembership, id))
			return
		}
	case raftpb.ConfChangeType_ConfChangeAddNode:
		if !learner {
			g.finish(p.id, fmt.Errorf("%w: replica %d is not a learner", ErrMembership, id))
			return
		}
	}
	trk := tracker.MakeProgressTracker(1, 0)
	trk.Config = st.Config
	for rid, pr := range st.Progress {
		trk.Progress[rid] = &pr
	}
	if _, _, err := (confchange.Changer{Tracker: trk, LastIndex: 1}).Simple(p.conf.GetChanges()...); err != nil {
		g.finish(p.id, fmt.Errorf("%w: %w", ErrMembership, err))
		return
	}
	if err := g.rn.ProposeConfChange(p.conf); err != nil {
		g.finish(p.id, fmt.Errorf("%w: %w", store.ErrProposalDropped, err))
		return
	}
	p.proposed = true
	g.confID = p.id
}

// appliedConf follows an applied membership change (the worker's): its
// proposer is told, a snapshot point is recorded at it for a learner it
// may have added, and a change that removes this replica stops it.
func (g *group) appliedConf(ctx context.Context, cc raftpb.ConfChangeI) error {
	v2 := cc.AsV2()
	if ctx := v2.GetContext(); len(ctx) == idSize {
		g.finish(binary.BigEndian.Uint64(ctx), nil)
	}
	g.confID = 0
	for _, ch := range v2.GetChanges() {
		if ch.GetType() == raftpb.ConfChangeType_ConfChangeRemoveNode && ch.GetNodeId() == g.replica {
			g.removed = true
		}
	}
	if g.folder != nil && !g.removed {
		if err := g.log.Truncate(ctx, 0, snapshotDescriptor(g.id)); err != nil {
			return fmt.Errorf("record a snapshot point: %w", err)
		}
	}
	return nil
}

// retire ends a replica that applied its own removal: the group leaves
// the host, the caller is told (Config.OnRemoved) so that it stops using
// the store, and the store is closed and its folder deleted. A group
// without a folder leaves its store to the caller.
func (h *Host) retire(g *group) { g.retired.Do(func() { h.retireOnce(g) }) }

func (h *Host) retireOnce(g *group) {
	h.mu.Lock()
	if h.groups[g.id] == g {
		delete(h.groups, g.id)
	}
	h.mu.Unlock()
	g.rnMu.Lock() // a worker may still be finishing the group
	g.close()
	g.rnMu.Unlock()
	if h.cfg.OnRemoved != nil {
		h.cfg.OnRemoved(g.id, g.replica)
	}
	log := h.cfg.Logger.With(slog.Uint64("group", g.id), slog.Uint64("replica", g.replica))
	if g.folder == nil {
		log.Info("replica_removed")
		return
	}
	// No worker, snapshot checkpoint or erase uses the store any more.
	g.rnMu.Lock()
	defer g.rnMu.Unlock()
	g.eraseMu.Lock()
	defer g.eraseMu.Unlock()
	st := g.store()
	st.Replicate(nil)
	var err error
	if g.folder.Close != nil {
		err = g.folder.Close(st) // the node stops serving it too
	} else {
		err = st.Close()
	}
	dir := g.folder.Dir
	err = errors.Join(err, DeleteFolder(dir))
	if b := g.folder.BlobsDir; b != "" {
		err = errors.Join(err, DeleteFolder(b)) // its attachments go with it
	}
	if ks := g.folder.KeyStoreDir; ks != "" {
		err = errors.Join(err, DeleteFolder(ks)) // its keys go with it
	}
	if err != nil {
		log.Error("replica_removed_folder_not_deleted", slog.String("folder", dir), slog.Any("err", err))
		return
	}
	log.Info("replica_removed", slog.String("folder", dir))
}

// DeleteFolder deletes a replica's folder at dir with what a snapshot
// may have left beside it, and syncs the parent, so that none of its
// files (purged content included) stays.
func DeleteFolder(dir string) error {
	var err error
	for _, d := range []string{dir, dir + stagedSuffix, dir + replacedSuffix} {
		err = errors.Join(err, os.RemoveAll(d))
	}
	return errors.Join(err, durable.SyncDir(filepath.Dir(dir)))
}

// Retire stops this host's replica of the group and deletes its folder,
// as when it applies its own removal: for a node that learns from the
// shard map that its replica was removed while it was away (it never
// applied the removal). replicaID must be the replica it runs.
func (h *Host) Retire(groupID, replicaID uint64) error {
	g := h.group(groupID)
	if g == nil || g.replica != replicaID {
		return fmt.Errorf("group %d replica %d: %w", groupID, replicaID, ErrNoGroup)
	}
	g.rnMu.Lock()
	if g.failed == nil {
		g.fail(ErrRemoved)
	}
	g.rnMu.Unlock()
	h.retire(g)
	return nil
}

// Members returns the group's voters and learners as this replica's
// applied membership has them.
func (h *Host) Members(groupID uint64) (voters, learners []uint64, err error) {
	g := h.group(groupID)
	if g == nil {
		return nil, nil, fmt.Errorf("group %d: %w", groupID, ErrNoGroup)
	}
	g.rnMu.Lock()
	cfg := g.rn.Status().Config
	g.rnMu.Unlock()
	voters = slices.Sorted(maps.Keys(cfg.Voters.IDs()))
	for id := range cfg.Learners {
		learners = append(learners, id)
	}
	for id := range cfg.LearnersNext {
		learners = append(learners, id)
	}
	slices.Sort(learners)
	return voters, learners, nil
}

// FolderOnDisk reports whether a replica's folder at dir, or what a
// snapshot left beside it, is on disk: what DeleteFolder would delete.
func FolderOnDisk(dir string) bool {
	for _, d := range []string{dir, dir + stagedSuffix, dir + replacedSuffix} {
		if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) {
			return true
		}
	}
	return false
}
