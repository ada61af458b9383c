package replica

// Catching up by snapshot through the backup stream
// (docs/replication-design.md §7). A leader whose follower needs entries
// the log dropped gets a MsgSnap from raft holding only the snapshot
// point's metadata and descriptor; instead of sending it with the other
// messages it streams its store's backup (a checkpoint taken while the
// group's apply is held) with the message to the follower through the
// transport (SnapshotSender), and reports the outcome to raft. The
// follower unpacks the stream beside its folder, verified, and only then
// steps the message into raft; when raft takes the snapshot the worker
// adopts it into the unpacked state (this replica's hard state, the
// snapshot's log) and swaps the folders (swap.go). The stream carries
// the shard's audit trail after the database (snapstream.go), and the
// database's archive a sealed shard's key store.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Folder is where a replica's store lives, for catching up by snapshot.
type Folder struct {
	// Dir is the store's database folder.
	Dir string
	// Trail is the shard's audit trail ("" when the replica keeps none):
	// a snapshot carries the leader's as it stood at the snapshot's
	// applied index, which replaces this replica's with the database.
	Trail string
	// KeyStoreDir is the store's key store when the node seals ("":
	// it does not, and a sealed shard's snapshot does not verify): a
	// snapshot carries the leader's key store as of the snapshot's
	// applied index, which replaces this one with the database.
	KeyStoreDir string
	// Open opens the store in dir as the node opens its shards: the
	// unpacked state beside Dir (its key store beside KeyStoreDir), then
	// Dir once it replaced the old one.
	Open func(dir string) (*store.Store, error)
	// Close closes the store a snapshot replaces, before its folder is
	// set aside (nil: its Close): the node stops serving it there.
	Close func(*store.Store) error
	// BlobsDir is the replica's file:// folder of attachments ("": a
	// bucket, or none): a snapshot carries the leader's blobs into it,
	// and it goes with a removed replica.
	BlobsDir string
}

// beside are the folders outside Dir that a snapshot replaces with it.
func (f *Folder) beside() []string {
	var out []string
	for _, d := range []string{f.KeyStoreDir, f.Trail} {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

// stagedKeys is where a snapshot's key store is unpacked: beside the
// replica's key store ("" without one).
func (f *Folder) stagedKeys() string {
	if f.KeyStoreDir == "" {
		return ""
	}
	return f.KeyStoreDir + stagedSuffix
}

// Beside Dir (and each folder beside it): a snapshot being received, and
// the old folder while the new one takes its place (RecoverFolder).
const (
	stagedSuffix   = StagedSuffix
	replacedSuffix = ".replaced"
)

// StagedSuffix names, beside a replica's folders, the snapshot being
// received: Folder.Open is given Dir+StagedSuffix, whose key store is at
// KeyStoreDir+StagedSuffix.
const StagedSuffix = ".snapshot"

// SnapshotSender is a Transport that carries snapshots: the message and,
// out of band, the state it stands for.
type SnapshotSender interface {
	// SendSnapshot hands m (a MsgSnap) and the stream write produces to
	// the host of m.To (Host.ReceiveSnapshot) and returns once that
	// host took it or failed to.
	SendSnapshot(ctx context.Context, group uint64, m *raftpb.Message, write func(io.Writer) error) error
}

// Errors of snapshots.
var (
	// ErrSnapshotRefused: this replica cannot take a snapshot now (no
	// folder, another one arriving, a stream that does not verify); the
	// leader tries again later.
	ErrSnapshotRefused = errors.New("snapshot refused")
	// ErrNoSnapshotState: raft took a snapshot whose state never arrived.
	ErrNoSnapshotState = errors.New("a snapshot came without its state")
)

// staged is a snapshot's state unpacked beside the folder, waiting for
// raft to take its message.
type staged struct {
	m *raftpb.Message
	// dir is the staged database; keys where its key store is unpacked
	// ("" for none); trail the folder whose staged copy holds the audit
	// trail ("" for none); beside every folder whose staged copy is
	// swapped in with it; blobs where its blobs were unpacked ("" for
	// none).
	dir    string
	keys   string
	trail  string
	beside []string
	blobs  string
	done   chan error // buffered
}

// stagedBlobs is where a snapshot's blobs are unpacked: beside the
// replica's folder of attachments ("" without one).
func (f *Folder) stagedBlobs() string {
	if f.BlobsDir == "" {
		return ""
	}
	return f.BlobsDir + stagedSuffix
}

// remove removes what is left of a staged snapshot.
func (in *staged) remove() error {
	errs := []error{os.RemoveAll(in.dir)}
	if in.blobs != "" {
		errs = append(errs, os.RemoveAll(in.blobs))
	}
	for _, d := range in.beside {
		errs = append(errs, os.RemoveAll(d+stagedSuffix))
	}
	return errors.Join(errs...)
}

// sendSnapshots takes the MsgSnaps out of msgs and sends each with the
// state on its own goroutine (one per follower at a time); raft hears
// how it went through ReportSnapshot.
func (g *group) sendSnapshots(ctx context.Context, tr Transport, msgs []*raftpb.Message) []*raftpb.Message {
	rest := msgs[:0:0]
	for _, m := range msgs {
		if m.GetType() != raftpb.MessageType_MsgSnap {
			rest = append(rest, m)
			continue
		}
		to := m.GetTo()
		ss, ok := tr.(SnapshotSender)
		g.mu.Lock()
		busy, bg := g.sending[to], g.bg
		if ok && g.folder != nil && !busy && bg != nil {
			g.sending[to] = true
		}
		g.mu.Unlock()
		switch {
		case busy:
			continue // raft sends it again once told of the one under way
		case !ok || g.folder == nil || bg == nil:
			g.host.ReportSnapshot(g.id, to, raft.SnapshotFailure)
			continue
		}
		bg.Go(func() {
			err := ss.SendSnapshot(ctx, g.id, m, func(w io.Writer) error { return g.writeState(ctx, w) })
			g.mu.Lock()
			delete(g.sending, to)
			g.mu.Unlock()
			status := raft.SnapshotFinish
			if err != nil {
				status = raft.SnapshotFailure
				g.logger.Warn("replica_snapshot_not_sent", slog.Uint64("group", g.id), slog.Uint64("to", to), slog.Any("err", err))
			}
			g.host.ReportSnapshot(g.id, to, status)
		})
	}
	return rest
}

// writeState streams the store's backup, with a sealed shard's key
// store, and the shard's audit trail (snapstream.go), all taken while
// the group applies nothing, so that they stand at one applied index (at
// or after the snapshot point raft names, which the follower's log
// skips): the key store holds the keys of the state, and the key-store
// commands after it in the log apply to it.
func (g *group) writeState(ctx context.Context, w io.Writer) error {
	st := g.store()
	// A file:// folder's blobs go with the state, read through a blob
	// store of their own: the group's deletions never wait for it.
	var blobs *attachments.Blobs
	if d := g.folder.BlobsDir; d != "" {
		u, err := config.FileURL(d)
		if err == nil {
			blobs, err = attachments.Open(ctx, u)
		}
		if err != nil {
			return err
		}
		defer blobs.Close()
	}
	hold := &applyHold{g: g, st: st, trail: g.folder.Trail}
	defer hold.close()
	c, err := backup.NewCreator(backup.Options{Store: st, KeyStore: backup.KeyStoreOf(st), Blobs: blobs, Hold: hold})
	if err != nil {
		return err
	}
	return writeStream(ctx, w, func(w io.Writer) error {
		_, err := c.Write(ctx, w, false)
		return err
	}, func(w io.Writer) error { return hold.copy.Write(ctx, w) })
}

// applyHold holds the group's worker while the checkpoint is taken, and
// takes the trail's copy in the same hold.
type applyHold struct {
	g     *group
	st    *store.Store
	trail string
	copy  *audit.TrailCopy // set by Hold
}

func (h *applyHold) Hold(ctx context.Context) (audit.Head, func(), error) {
	if err := ctx.Err(); err != nil {
		return audit.Head{}, nil, err // no release is called on an error
	}
	h.g.rnMu.Lock()
	if h.g.store() != h.st {
		h.g.rnMu.Unlock()
		return audit.Head{}, nil, fmt.Errorf("%w: the store was replaced", ErrSnapshotRefused)
	}
	h.copy = &audit.TrailCopy{}
	if h.trail != "" {
		c, err := audit.CopyTrail(h.trail)
		if err != nil {
			h.g.rnMu.Unlock()
			return audit.Head{}, nil, fmt.Errorf("copy the shard's audit trail: %w", err)
		}
		h.copy = c
	}
	return audit.Head{}, h.g.rnMu.Unlock, nil
}

// close releases the trail's copy.
func (h *applyHold) close() {
	if h.copy != nil {
		_ = h.copy.Close()
	}
}

// ReceiveSnapshot takes a snapshot sent to one of this host's replicas:
// the state read from r is unpacked and verified beside the replica's
// folder, which stays as it is, and m is then stepped into raft; once
// raft took it, the unpacked state replaces the folder. A stream that
// breaks or does not verify leaves the replica as it was, and the
// leader sends again.
func (h *Host) ReceiveSnapshot(ctx context.Context, groupID uint64, m *raftpb.Message, r io.Reader) error {
	g := h.group(groupID)
	if g == nil {
		return fmt.Errorf("group %d: %w", groupID, ErrNoGroup)
	}
	if g.folder == nil || m.GetType() != raftpb.MessageType_MsgSnap || m.GetTo() != g.replica {
		return fmt.Errorf("group %d: %w: no folder to restore into, not a snapshot, or for another replica", groupID, ErrSnapshotRefused)
	}
	if !g.receiving.TryLock() {
		return fmt.Errorf("group %d: %w: another snapshot is arriving", groupID, ErrSnapshotRefused)
	}
	defer g.receiving.Unlock()
	in := &staged{m: m, dir: g.folder.Dir + stagedSuffix, keys: g.folder.stagedKeys(), trail: g.folder.Trail, beside: g.folder.beside(),
		blobs: g.folder.stagedBlobs(), done: make(chan error, 1)}
	if err := in.remove(); err != nil { // what an earlier one left
		return fmt.Errorf("group %d: %w", groupID, err)
	}
	if err := readStream(ctx, r, in); err != nil {
		_ = in.remove()
		return fmt.Errorf("group %d: receive snapshot: %w", groupID, err)
	}
	g.mu.Lock()
	g.snapIn = in
	g.mu.Unlock()
	h.sched.enqueue(groupID)
	var err error
	select {
	case err = <-in.done:
		return err
	case <-ctx.Done():
		err = ctx.Err()
	case <-h.life.Stopped():
		err = fmt.Errorf("group %d: %w", groupID, ErrStopped)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.snapIn == in { // else the worker took it, and ends it
		g.snapIn = nil
		_ = in.remove()
	}
	return err
}

// dropSnapshot ends a received snapshot a failed group will not take.
func (g *group) dropSnapshot() {
	g.mu.Lock()
	in := g.snapIn
	g.snapIn = nil
	g.mu.Unlock()
	if in != nil {
		_ = in.remove()
		in.done <- g.failed
	}
}

// stepSnapshot steps a staged snapshot's message (the worker's). Until
// the Ready loop is over, g.staged holds it for install.
func (g *group) stepSnapshot() {
	g.mu.Lock()
	in := g.snapIn
	g.snapIn = nil
	g.mu.Unlock()
	if in == nil {
		return
	}
	g.staged = in
	if err := g.rn.Step(in.m); err != nil {
		g.endStaged(fmt.Errorf("%w: %w", ErrSnapshotRefused, err))
	}
}

// endStaged tells the receiver how its snapshot ended and removes what
// is left of the state (nothing once installed).
func (g *group) endStaged(err error) {
	if in := g.staged; in != nil {
		g.staged = nil
		_ = in.remove()
		in.done <- err
	}
}

// install makes the Ready's snapshot this replica's state: the staged
// store adopts the snapshot's log with this replica's hard state and the
// Ready's entries, synced, and then takes the folder's place; the group
// goes on with the new store and log. The old folder, which may hold
// content purged since, is removed, and the new store's erase owed by
// the leader's (its files are copies of the leader's tables) runs next.
func (g *group) install(ctx context.Context, rd raft.Ready) (err error) {
	in := g.staged
	if in == nil {
		return ErrNoSnapshotState
	}
	g.staged = nil
	swapping := false
	defer func() {
		if err != nil && !swapping {
			// Past the swap's start the staged folders are the state
			// RecoverFolder puts in place.
			_ = in.remove()
		}
		in.done <- err
	}()
	hard, _, err := g.log.InitialState()
	if err != nil {
		return err
	}
	if rd.HardState != nil {
		hard = rd.HardState
	}
	snap := rd.Snapshot
	if err := adopt(ctx, g.folder, in.dir, store.RaftUpdate{Restored: true, Replica: g.replica, Install: snap, Entries: rd.Entries, HardState: hard,
		ConfState: snap.GetMetadata().GetConfState(), Sync: true}, keyStoreID(g.store())); err != nil {
		return fmt.Errorf("adopt snapshot %d: %w", snap.GetMetadata().GetIndex(), err)
	}
	if in.blobs != "" {
		// Before the state: a blob of a record is never missing once the
		// record is there.
		if _, err := attachments.AdoptBlobs(in.blobs, g.folder.BlobsDir); err != nil {
			return err
		}
	}
	if d := g.folder.BlobsDir; d != "" {
		// In the state: a crash once it is in place leaves the prune
		// below to RecoverFolder (prune.go).
		if err := owePrune(in.dir, d); err != nil {
			return err
		}
	}
	g.eraseMu.Lock() // no erase of the old store under way
	defer g.eraseMu.Unlock()
	old := g.store()
	old.Replicate(nil)
	closeOld := old.Close
	if g.folder.Close != nil {
		closeOld = func() error { return g.folder.Close(old) }
	}
	if err := closeOld(); err != nil {
		g.logger.Warn("replica_close_replaced_store", slog.Uint64("group", g.id), slog.Any("err", err))
	}
	swapping = true
	if err := swapFolders(g.folder.Dir, in.beside); err != nil {
		return err
	}
	st, err := g.folder.Open(g.folder.Dir)
	if err != nil {
		return fmt.Errorf("open the restored store: %w", err)
	}
	l, err := st.RaftLog(ctx)
	if err != nil {
		_ = st.Close()
		return err
	}
	g.mu.Lock()
	g.st, g.log = st, l
	g.mu.Unlock()
	g.storage.RaftLog = l
	if d := g.folder.BlobsDir; d != "" {
		// The blobs purged while this replica was behind: their
		// deletions were in the entries the snapshot replaced. Failing,
		// the group stops before it applies anything after the snapshot,
		// and RecoverFolder prunes when the node opens the shard again.
		n, err := attachments.PruneBlobs(ctx, d, st.HasAttachmentRecord)
		if err == nil {
			err = prunedDone(g.folder.Dir)
		}
		if err != nil {
			return fmt.Errorf("prune the blobs purged before the snapshot: %w", err)
		}
		if n > 0 {
			g.logger.Info("replica_snapshot_blobs_pruned", slog.Uint64("group", g.id), slog.Int("blobs", n))
		}
	}
	if _, ok := g.sm.(storeMachine); ok {
		g.sm = storeMachine{st}
		st.Replicate(groupProposer{h: g.host, g: g})
	}
	// The leader's checkpoint may owe an erase: its files are copies.
	g.eraseChecked = true
	g.kickErase(ctx, false)
	g.logger.Info("replica_snapshot_installed", slog.Uint64("group", g.id), slog.Uint64("replica", g.replica),
		slog.Uint64("index", snap.GetMetadata().GetIndex()), slog.Uint64("applied", l.Applied()))
	return nil
}

// keyStoreID is the identity of st's key store; "" when st is plain. A
// replica keeps it across a snapshot: its database becomes a copy of
// its leader's, bound to its own key store holding its leader's keys.
func keyStoreID(st *store.Store) string {
	if s := st.Sealer(); s != nil {
		return s.ID()
	}
	return ""
}

// adopt writes u into the log of the store unpacked in dir and checks
// that its state covers the snapshot; a sealed one's key store takes the
// identity keys ("": its leader's), bound to the unpacked database.
func adopt(ctx context.Context, f *Folder, dir string, u store.RaftUpdate, keys string) error {
	st, err := f.Open(dir)
	if err != nil {
		return err
	}
	l, err := st.RaftLog(ctx)
	if err == nil {
		err = l.Save(ctx, u)
	}
	if idx := u.Install.GetMetadata().GetIndex(); err == nil && l.Applied() < idx {
		err = fmt.Errorf("%w: the state was applied up to %d, the snapshot is at %d", store.ErrMalformed, l.Applied(), idx)
	}
	if err == nil {
		err = st.RebindKeyStore(ctx, keys)
	}
	return errors.Join(err, st.Close())
}
