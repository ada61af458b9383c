package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Orphan blobs (spec §16): a blob, or an upload's leftover, that no
// attachment record names (an upload killed after its blob completed and
// before its record was written; a temporary file or an open multipart
// upload of a killed upload). Retention's sweep owes its removal like a
// purge owes a blob's: a debt under sys:blob:<name> with Orphan set,
// written only while no record names the attachment, under the thread's
// stripe. AddAttachment refuses an attachment whose blob is owed, under
// the same stripe, so a record and an orphan debt never both exist: if a
// sweep ever overtook an upload (one slower than the grace period, in a
// process the sweep cannot see), the upload fails instead of keeping a
// record of a deleted blob.
//
//	sys:orphans:cursor   the last name the sweep looked at (it resumes after it)
const orphanCursorKey = "sys:orphans:cursor"

// OweOrphanBlob owes the removal of d (Orphan set, Name the object to
// remove: the attachment's blob or an upload's leftover of it) when no
// record names attachment d.ID and nothing is owed for d.Name yet; it
// reports whether it did. The debt is synced before it returns.
func (s *Store) OweOrphanBlob(ctx context.Context, d OwedBlob) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := validateIDs(d.Thread, d.Message, d.ID); err != nil {
		return false, err
	}
	if !d.Orphan || !validOwedName(d) {
		return false, fmt.Errorf("orphan blob %q: %w: not an orphan of attachment %s", d.Name, ErrInvalidArgument, d.ID)
	}
	h := s.hold(d.Thread)
	defer h.release()
	for _, k := range [][]byte{attachmentKey(d.Thread, d.Message, d.ID), owedBlobKey(d.Name)} {
		if taken, err := s.has(k); err != nil || taken {
			return false, err
		}
	}
	d.PurgedTS = s.now().UnixNano()
	v, err := encode(d)
	if err != nil {
		return false, err
	}
	b := s.db.NewBatch()
	_ = b.Set(owedBlobKey(d.Name), v, nil)
	if err := s.apply(ctx, write{kind: writeState, batch: b, sync: true, under: h}); err != nil {
		return false, fmt.Errorf("owe orphan blob %s: %w", d.Name, err)
	}
	return true, nil
}

// HasAttachmentRecord reports whether a record names attachment aid of
// message mid in thread tid, deleted or not, without opening it.
func (s *Store) HasAttachmentRecord(ctx context.Context, tid, mid, aid string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := validateIDs(tid, mid, aid); err != nil {
		return false, err
	}
	return s.has(attachmentKey(tid, mid, aid))
}

// OrphanCursor returns where the orphan sweep stopped: the last name it
// looked at, "" to start from the first.
func (s *Store) OrphanCursor(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	v, err := s.get([]byte(orphanCursorKey))
	if errors.Is(err, ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("orphan cursor: %w", err)
	}
	return string(v), nil
}

// SetOrphanCursor keeps where the sweep stopped ("" starts over). Not
// synced: a cursor lost to a crash only makes the next sweep look again.
func (s *Store) SetOrphanCursor(ctx context.Context, name string) error {
	b := s.db.NewBatch()
	if name == "" {
		_ = b.Delete([]byte(orphanCursorKey), nil)
	} else {
		_ = b.Set([]byte(orphanCursorKey), []byte(name), nil)
	}
	if err := s.apply(ctx, write{kind: writeState, batch: b}); err != nil {
		return fmt.Errorf("keep orphan cursor: %w", err)
	}
	return nil
}

// validOwedName reports whether d.Name is what a debt of attachment d.ID
// may remove: its blob, or (an orphan's) a leftover named after it.
func validOwedName(d OwedBlob) bool {
	name := BlobName(d.Thread, d.Message, d.ID)
	if d.Name == name {
		return true
	}
	return d.Orphan && strings.HasPrefix(d.Name, name+".") && !strings.Contains(d.Name[len(name):], "/")
}
