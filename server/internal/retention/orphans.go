package retention

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// The orphan sweep (spec §16, docs/attachments.md): an upload writes its
// blob, then its record, so a process killed in between leaves a blob no
// record names; a killed upload can also leave a temporary file. A run
// removes those once older than the grace period, bounded per run.
//
// Why a blob whose record is being written is never taken:
//   - an upload of this process is tracked from before its blob exists
//     until its record is written or it failed (OrphanStore.Writing), and
//     the sweep asks that before it looks for the record;
//   - the sweep owes the removal (store.OweOrphanBlob) only while no
//     record names the attachment, and AddAttachment refuses an
//     attachment whose blob is owed, both under the thread's stripe: a
//     record and an orphan debt never both exist;
//   - the grace period (PROGRESSDB_RETENTION_ORPHAN_GRACE, at least
//     MIN_PERIOD unless short periods are allowed) covers what this
//     process cannot see: the blob store's clock behind this host's, and
//     an upload by another process on the same blob store (not a setup
//     the product makes). The assumption: a blob is recorded within the
//     grace period of the last write its store reports (the object's
//     modification time; S3 reports a multipart upload's start).
//
// The removal then goes the way a purged attachment's does
// (deleteOwedBlobs): the blob is deleted, one audit item is written
// (orphan: true), and the debt is cleared once the item is synced, so a
// run killed anywhere leaves the debt for the next run.

const (
	// defaultOrphanGrace is the grace period of a configuration built in
	// code; config.Load's default is the same day.
	defaultOrphanGrace = 24 * time.Hour
	// defaultOrphanScan bounds the objects one run looks at.
	defaultOrphanScan = 10_000
)

// OrphanStore is a blob store whose orphans a run can sweep
// (attachments.Blobs): it walks every object in a stable order, says
// whether an upload of this process is writing one, and reads one's
// digest.
type OrphanStore interface {
	BlobStore
	Walk(ctx context.Context, after string, fn func(attachments.Object) (bool, error)) error
	Writing(name string) bool
	Digest(ctx context.Context, name string) (int64, string, error)
}

// sweepOrphans looks at up to orphanCap objects after where the last
// sweep stopped, owes the removal of every orphan older than the grace
// period, then deletes and records them. Dry runs, replays and stopped
// runs sweep nothing.
func (rn *run) sweepOrphans(ctx context.Context) {
	r := rn.r
	bs, ok := r.blobs.(OrphanStore)
	if !ok || rn.dry || rn.replaying() || rn.stop != nil {
		return
	}
	from, err := r.st.OrphanCursor(ctx)
	if err != nil {
		rn.fail(ctx, stagePurge, "", err)
		return
	}
	cutoff := r.now().Add(-r.cfg.OrphanGrace)
	seen, owed, last := 0, 0, from
	err = bs.Walk(ctx, from, func(o attachments.Object) (bool, error) {
		seen++
		last = o.Name
		ok, err := rn.oweOrphan(ctx, bs, o, cutoff)
		if ok {
			owed++
		}
		return seen < r.orphanCap && rn.stop == nil, err
	})
	if err != nil {
		rn.fail(ctx, stagePurge, "", fmt.Errorf("sweep orphan blobs: %w", err))
		return
	}
	if seen < r.orphanCap {
		last = "" // the walk reached the end: the next sweep starts over
	}
	if err := r.st.SetOrphanCursor(ctx, last); err != nil {
		rn.fail(ctx, stageSync, "", err)
		return
	}
	if ls, ok := bs.(leftoverSweeper); ok {
		// Best effort too: the next run asks again.
		if err := ls.SweepLeftovers(ctx, cutoff); err != nil {
			r.metrics.countError(stagePurge)
			r.log.Warn("retention_leftover_sweep_failed", "run_id", rn.id, "err", err)
		}
	}
	if us, ok := bs.(uploadLister); ok {
		// Best effort: a bucket policy without the multipart rights
		// (or a store that lacks the call) must not fail every run.
		n, err := rn.oweOpenUploads(ctx, bs, us, cutoff)
		if err != nil {
			r.metrics.countError(stagePurge)
			r.log.Warn("retention_open_uploads_failed", "run_id", rn.id, "err", err)
		}
		owed += n
	}
	r.log.Debug("retention_orphans_swept", "run_id", rn.id, "looked_at", seen, "orphans", owed, "from", from, "next", last)
	if owed > 0 {
		rn.deleteOwedBlobs(ctx)
	}
}

// orphanRef names the attachment an object of the blob store belongs
// to; leftover: an upload's temporary file of it (attachments.ObjectOf).
type orphanRef struct {
	tid, mid, aid string
	leftover      bool
}

// orphanOf says whether the object (or open upload) called name, last
// written at written, is an orphan: a name of the product's, older than
// cutoff, no upload of this process writing it, and no record naming
// its attachment. Writing is asked before the record is looked for:
// from then on no upload of this process can add the record.
func (rn *run) orphanOf(ctx context.Context, bs OrphanStore, name string, written, cutoff time.Time) (orphanRef, bool, error) {
	var ref orphanRef
	var ok bool
	ref.tid, ref.mid, ref.aid, ref.leftover, ok = attachments.ObjectOf(name)
	if !ok || !written.Before(cutoff) || bs.Writing(name) {
		return ref, false, nil
	}
	has, err := rn.r.st.HasAttachmentRecord(ctx, ref.tid, ref.mid, ref.aid)
	return ref, err == nil && !has, err
}

// oweOrphan owes the removal of o when it is an orphan (orphanOf).
func (rn *run) oweOrphan(ctx context.Context, bs OrphanStore, o attachments.Object, cutoff time.Time) (bool, error) {
	ref, orphan, err := rn.orphanOf(ctx, bs, o.Name, o.ModTime, cutoff)
	if !orphan {
		return false, err
	}
	size, sum, err := bs.Digest(ctx, o.Name)
	switch {
	case errors.Is(err, attachments.ErrBlobMissing):
		return false, nil // removed since the walk saw it
	case err != nil:
		// Unreadable: removed all the same, recorded without a digest.
		rn.r.log.Warn("retention_orphan_unreadable", "run_id", rn.id, "blob", o.Name, "err", err)
		size, sum = o.Size, ""
	}
	return rn.r.st.OweOrphanBlob(ctx, store.OwedBlob{Name: o.Name, Thread: ref.tid, Message: ref.mid, ID: ref.aid,
		Size: size, SHA256: sum, RunID: rn.id, Cause: audit.CauseDeleted, Orphan: true})
}

// leftoverSweeper is a blob store with copies beyond the one the walk
// sees (attachments.ShardBlobs: a replicated shard's file:// folders),
// each of which can hold uploads' leftovers of its own.
type leftoverSweeper interface {
	SweepLeftovers(ctx context.Context, cutoff time.Time) error
}

// uploadLister is a blob store whose incomplete multipart uploads a run
// can list and abort (attachments.Blobs on S3).
type uploadLister interface {
	OpenUploads(ctx context.Context, fn func(attachments.OpenUpload) (bool, error)) error
	uploadAborter
}

// oweOpenUploads owes the abort of every multipart upload begun before
// cutoff for an attachment no record names and no upload of this
// process is writing, looking at most orphanCap of them.
func (rn *run) oweOpenUploads(ctx context.Context, bs OrphanStore, us uploadLister, cutoff time.Time) (int, error) {
	r := rn.r
	seen, owed := 0, 0
	err := us.OpenUploads(ctx, func(u attachments.OpenUpload) (bool, error) {
		seen++
		ref, orphan, err := rn.orphanOf(ctx, bs, u.Name, u.Initiated, cutoff)
		if !orphan || ref.leftover {
			return seen < r.orphanCap, err
		}
		digest := sha256.Sum256([]byte(u.ID))
		ok, err := r.st.OweOrphanBlob(ctx, store.OwedBlob{Name: u.Name + ".upload-" + hex.EncodeToString(digest[:8]),
			Thread: ref.tid, Message: ref.mid, ID: ref.aid, RunID: rn.id, Cause: audit.CauseDeleted, Orphan: true, Upload: u.ID})
		if ok {
			owed++
		}
		return seen < r.orphanCap, err
	})
	return owed, err
}
