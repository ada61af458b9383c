package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// Deleted attachments (spec §16): an attachment soft-deleted on its own,
// its message live, is purged after its thread's message period, as a
// message is. Its deletion index entry is written in the batch of its
// soft delete and removed by its restore, by its own purge, and by its
// message's or thread's purge, so that a run finds what is due without
// reading any thread:
//
//	idx:del:a:<deleted_ts 20d>:<tid>/<mid>/<aid>
//
// A database from before the index gets its entries from the one-time
// rebuild at open that a new schema version triggers (index.go).
const delAttachmentNS = "idx:del:a:"

// AttachmentDeletion is a deletion index entry of an attachment.
type AttachmentDeletion struct {
	Thread, Message, ID string
	DeletedTS           int64
}

func appendAttachmentDeletionKey(b []byte, deletedTS int64, tid, mid, aid string) []byte {
	b = append(b, delAttachmentNS...)
	b = appendPadded(b, indexTS(deletedTS))
	b = append(b, ':')
	return append(b, BlobName(tid, mid, aid)...)
}

func attachmentDeletionKey(deletedTS int64, tid, mid, aid string) []byte {
	return appendAttachmentDeletionKey(nil, deletedTS, tid, mid, aid)
}

// parseAttachmentDeletion reads an index key; false for one that is not
// <ts>:<tid>/<mid>/<aid> with valid IDs.
func parseAttachmentDeletion(key []byte) (AttachmentDeletion, bool) {
	rest, ok := bytes.CutPrefix(key, []byte(delAttachmentNS))
	if !ok || len(rest) < padWidth+2 || rest[padWidth] != ':' {
		return AttachmentDeletion{}, false
	}
	ts, ok := parsePadded(rest[:padWidth])
	if !ok {
		return AttachmentDeletion{}, false
	}
	ids := strings.Split(string(rest[padWidth+1:]), "/")
	if len(ids) != 3 || validateIDs(ids...) != nil {
		return AttachmentDeletion{}, false
	}
	return AttachmentDeletion{Thread: ids[0], Message: ids[1], ID: ids[2], DeletedTS: ts}, true
}

// ScanAttachmentDeletions calls fn for every soft-deleted attachment with
// from <= deleted_ts <= to, in deletion-time order, from a snapshot (fn
// may purge). ErrStopScan from fn ends the scan without error; entries
// that do not parse are skipped.
func (s *Store) ScanAttachmentDeletions(ctx context.Context, from, to int64, fn func(AttachmentDeletion) error) error {
	err := scanByDeletionTime(ctx, s, []byte(delAttachmentNS), from, to, func(it *pebble.Iterator) (AttachmentDeletion, bool) {
		return parseAttachmentDeletion(it.Key())
	}, fn)
	if err != nil {
		return fmt.Errorf("scan attachment deletions: %w", err)
	}
	return nil
}

// AttachmentPurge says who purges a deleted attachment: the run and
// cause its owed blob deletion records, and where the purged record's
// span is noted for the erase step.
type AttachmentPurge struct {
	RunID, Cause string
	Erase        *EraseSpans
	// Replayed: a restore's replay repeats a purge the audit trail
	// records, whatever the copy's record says (deleted or not); a hold
	// or a purge of its message or thread begun still wins.
	Replayed bool
}

// ClaimAttachment marks the deleted attachment d as being purged by run
// runID (its record's purge_run), after the checks PurgeAttachment makes:
// from then on a restore answers ErrPurgeInProgress. Not synced: an
// exporting run syncs the store before the attachment's export record,
// so that a record found after a crash has its claim. ErrNotEligible
// when it is no longer to be purged.
func (s *Store) ClaimAttachment(ctx context.Context, d AttachmentDeletion, runID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validateIDs(d.Thread, d.Message, d.ID); err != nil {
		return err
	}
	h := s.locks.hold(d.Thread)
	defer h.release()
	a, err := s.purgeableAttachment(ctx, d)
	if err != nil {
		return err
	}
	a.PurgeRun = runID
	v, err := encode(a)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	_ = b.Set(attachmentKey(d.Thread, d.Message, d.ID), v, nil)
	if err := s.apply(ctx, write{kind: writeState, batch: b, held: h}); err != nil {
		return fmt.Errorf("claim attachment %s: %w", d.ID, err)
	}
	return nil
}

// PurgeAttachment deletes the deleted attachment d's record and its index
// entry and owes its blob's deletion (OwedBlobs), in one batch, after
// checking under the thread's lock that it is still deleted at
// d.DeletedTS, that its thread is not on legal hold, and that no purge of
// its thread or message has begun (that purge takes it). ErrNotEligible
// otherwise, nothing written. Not synced: the blob is deleted only after
// a store sync (retention's blob step).
func (s *Store) PurgeAttachment(ctx context.Context, d AttachmentDeletion, opts AttachmentPurge) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validateIDs(d.Thread, d.Message, d.ID); err != nil {
		return err
	}
	h := s.locks.hold(d.Thread)
	defer h.release()
	if opts.Replayed {
		a, err := s.readAttachment(d.Thread, d.Message, d.ID)
		if err != nil {
			return fmt.Errorf("purge attachment %s: %w: %w", d.ID, ErrNotEligible, err)
		}
		d.DeletedTS = a.DeletedTS
		if !a.Deleted {
			// Live in the copy (deleted after it was taken): not indexed.
			if err := s.checkAttachmentPurge(ctx, d, a); err != nil {
				return err
			}
			return s.purgeAttachmentRecord(ctx, h, a, 0, false, opts)
		}
	}
	a, err := s.purgeableAttachment(ctx, d)
	if err != nil {
		return err
	}
	return s.purgeAttachmentRecord(ctx, h, a, d.DeletedTS, true, opts)
}

// purgeAttachmentRecord deletes a's record (and its index entry when
// indexed, at deletedTS) and owes its blob, in one batch.
func (s *Store) purgeAttachmentRecord(ctx context.Context, h *held, a Attachment, deletedTS int64, indexed bool, opts AttachmentPurge) error {
	d := AttachmentDeletion{Thread: a.Thread, Message: a.Message, ID: a.ID}
	debt, err := s.encodeDebt(ctx, a, PurgeMarker{RunID: opts.RunID, Cause: opts.Cause, Replayed: opts.Replayed}, false)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	_ = b.Delete(attachmentKey(d.Thread, d.Message, d.ID), nil)
	if indexed {
		_ = b.Delete(attachmentDeletionKey(deletedTS, d.Thread, d.Message, d.ID), nil)
	}
	_ = b.Set(owedBlobKey(a.BlobName()), debt, nil)
	if opts.Erase != nil {
		// Its filename and type are content: the erase step removes them
		// from the files, like a purged message's.
		p := attachmentPrefix(d.Thread, d.Message)
		opts.Erase.add(p, upperBound(p))
	}
	if err := s.apply(ctx, write{kind: writePurge, batch: b, held: h}); err != nil {
		return fmt.Errorf("purge attachment %s: %w", d.ID, err)
	}
	return nil
}

// purgeableAttachment reads d's record and checks it may be purged on its
// own; the caller holds the thread's lock.
func (s *Store) purgeableAttachment(ctx context.Context, d AttachmentDeletion) (Attachment, error) {
	a, err := s.readAttachment(d.Thread, d.Message, d.ID)
	switch {
	case err != nil:
		return a, fmt.Errorf("purge attachment %s: %w: %w", d.ID, ErrNotEligible, err)
	case !a.Deleted:
		return a, fmt.Errorf("purge attachment %s: %w: restored", d.ID, ErrNotEligible)
	case a.DeletedTS != d.DeletedTS:
		return a, fmt.Errorf("purge attachment %s: %w: deleted_ts is %d, not %d", d.ID, ErrNotEligible, a.DeletedTS, d.DeletedTS)
	}
	return a, s.checkAttachmentPurge(ctx, d, a)
}

// checkAttachmentPurge refuses the purge of a on its own when its thread
// is on hold or a purge of its thread or message has begun.
func (s *Store) checkAttachmentPurge(ctx context.Context, d AttachmentDeletion, a Attachment) error {
	switch t, err := s.readThread(d.Thread); {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return fmt.Errorf("purge attachment %s: %w: thread: %w", d.ID, ErrNotEligible, err)
	case t.LegalHold:
		return fmt.Errorf("purge attachment %s: %w: thread on legal hold", d.ID, ErrNotEligible)
	}
	if err := s.refusePurging(ctx, d.Thread, "purge attachment of thread"); err != nil {
		return fmt.Errorf("%w: %w", ErrNotEligible, err)
	}
	if err := s.refuseClaimed(d.Message, "purge attachment of"); err != nil {
		return fmt.Errorf("%w: %w", ErrNotEligible, err)
	}
	return nil
}
