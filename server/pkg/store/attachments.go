package store

import (
	"bytes"
	"context"
	"crypto/cipher"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Attachments (spec §16, docs/attachments.md): a file attached to one
// message. Its bytes live in a blob store (server/pkg/attachments); its
// metadata lives here, under its thread's keys, so that a thread's purge
// deletes it with the rest:
//
//	thread:<tid>:att:<mid>:<aid>   attachment metadata (JSON)
//
// A message's attachments are the keys under thread:<tid>:att:<mid>:, a
// thread's those under thread:<tid>:att:, in ID order (IDs are
// time-sortable, so upload order).
//
// With a Sealer, an attachment is sealed under the key of its message
// (the (thread, author) key of the message's author): its filename,
// content type and SHA-256 in the record, its bytes in the blob (the
// record's key number says which). Size, IDs, times and flags stay
// plaintext, as a message's do.

const attSuffix = "att:"

// Attachment is an attachment's metadata (spec §16).
type Attachment struct {
	ID          string `json:"id"`
	Thread      string `json:"thread"`
	Message     string `json:"message"`
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256,omitempty"` // hex of the file's bytes
	ContentType string `json:"content_type,omitempty"`
	Filename    string `json:"filename,omitempty"`
	CreatedTS   int64  `json:"created_ts"`
	Deleted     bool   `json:"deleted"`
	DeletedTS   int64  `json:"deleted_ts"`
	// Key and Sealed: the number of the data key that sealed the
	// attachment (its blob and its metadata) and the sealed metadata, in
	// standard base64; 0 and "" for a plain attachment.
	Key    uint32 `json:"key,omitempty"`
	Sealed string `json:"sealed,omitempty"`
	// PurgeRun is the retention run that claimed the deleted attachment
	// for its own purge (attdeletions.go); a restore is refused from then on.
	PurgeRun string `json:"purge_run,omitempty"`
	// Unreadable: sealed, and its key is gone; SHA256, ContentType and
	// Filename are empty, and the blob opens no more.
	Unreadable bool `json:"-"`
}

// BlobName is the name of the attachment's bytes in the blob store:
// <tid>/<mid>/<aid>. IDs hold no '/', so a name is one attachment's.
func (a Attachment) BlobName() string { return BlobName(a.Thread, a.Message, a.ID) }

// BlobName is the blob name of attachment aid of message mid in thread tid.
func BlobName(tid, mid, aid string) string { return tid + "/" + mid + "/" + aid }

// attachmentPrefix is thread:<tid>:att:<mid>: (every attachment of the
// message), or thread:<tid>:att: when mid is "" (every one of the thread).
func attachmentPrefix(tid, mid string) []byte {
	b := append(threadPrefix(tid), attSuffix...)
	if mid != "" {
		b = append(append(b, mid...), ':')
	}
	return b
}

func attachmentKey(tid, mid, aid string) []byte {
	return append(attachmentPrefix(tid, mid), aid...)
}

// The associated data of an attachment's seals binds them to the
// attachment and the key number, so that a blob header or a record
// copied to another attachment, message or thread does not open:
//
//	"pdb-attach-1" 0 part 0 tid 0 mid 0 aid 0 key(10d)
//
// part is "blob" (the blob's wrapped stream key, server/pkg/sealstream)
// or "meta" (the record's sealed fields).
const attachTag = "pdb-attach-1"

func attachAD(part, tid, mid, aid string, key uint32) []byte {
	b := make([]byte, 0, len(attachTag)+len(part)+len(tid)+len(mid)+len(aid)+16)
	for _, f := range []string{attachTag, part, tid, mid, aid} {
		b = append(append(b, f...), 0)
	}
	return appendKeyNum(b, key)
}

// AttachmentBlobAD is the associated data a sealed blob's header is
// wrapped with (docs/attachments.md).
func AttachmentBlobAD(a Attachment) []byte {
	return attachAD("blob", a.Thread, a.Message, a.ID, a.Key)
}

// AttachmentSeal is what an upload needs before its bytes stream in: the
// attachment's new ID and, on a sealing store, the key it is sealed under.
type AttachmentSeal struct {
	Attachment Attachment // ID, Thread, Message and Key set
	// AEAD wraps the blob's stream key (with AttachmentBlobAD); nil when
	// the store does not seal, and the bytes are stored as they come.
	AEAD cipher.AEAD
}

// NewAttachment prepares an upload to message mid of thread tid: it
// checks that both are live and answers the new attachment's ID and key.
// Nothing is written: AddAttachment records the attachment once its
// blob is complete. ErrNotFound for an absent or deleted thread or
// message; ErrUnreadable when the message's key is gone.
func (s *Store) NewAttachment(ctx context.Context, tid, mid string) (AttachmentSeal, error) {
	if err := validateIDs(tid, mid); err != nil {
		return AttachmentSeal{}, err
	}
	if err := s.refusePlain(); err != nil {
		return AttachmentSeal{}, err
	}
	m, err := s.attachableMessage(ctx, tid, mid)
	if err != nil {
		return AttachmentSeal{}, err
	}
	out := AttachmentSeal{Attachment: Attachment{ID: s.NewID(), Thread: tid, Message: mid}}
	if s.sealer == nil {
		return out, nil
	}
	a, num, err := s.sealKey(ctx, tid, m.Key, m.Author)
	if err != nil {
		return AttachmentSeal{}, fmt.Errorf("attach to message %s: %w", mid, err)
	}
	out.Attachment.Key, out.AEAD = num, a
	return out, nil
}

// attachableMessage returns message mid (opened) when it and its thread
// are live and no purge has begun on either.
func (s *Store) attachableMessage(ctx context.Context, tid, mid string) (Message, error) {
	if _, err := s.liveThread(tid); err != nil {
		return Message{}, err
	}
	if err := s.refusePurging(ctx, tid, "attach to thread"); err != nil {
		return Message{}, err
	}
	return s.changeableMessage(ctx, tid, mid, "attach to")
}

// AddAttachment records a, whose blob is complete, as an attachment of
// its message (a from NewAttachment, with Size, SHA256, ContentType,
// Filename filled in). The thread and message are checked again under
// the thread's lock: one deleted or claimed by a purge meanwhile refuses
// it (ErrNotFound, ErrPurgeInProgress), and the caller deletes the blob.
func (s *Store) AddAttachment(ctx context.Context, a Attachment) (Attachment, error) {
	return s.addAttachment(ctx, a, nil)
}

// AddAttachmentWith is AddAttachment on a replicated store whose record's
// command also makes effect (of kind) on every replica, before its batch
// (the blob's move into place in each replica's folder:
// server/pkg/attachments). ErrNotReplicated on a store that is not
// replicated.
func (s *Store) AddAttachmentWith(ctx context.Context, a Attachment, kind EffectKind, effect []byte) (Attachment, error) {
	if !s.Replicated() {
		return Attachment{}, ErrNotReplicated
	}
	if len(effect) == 0 || kind == 0 || kind >= effectKinds {
		return Attachment{}, fmt.Errorf("%w: empty effect, or of kind %d", ErrInvalidArgument, kind)
	}
	return s.addAttachment(ctx, a, &fxw{kind, effect})
}

// fxw is a write's effect and its kind.
type fxw struct {
	kind   EffectKind
	effect []byte
}

func (s *Store) addAttachment(ctx context.Context, a Attachment, fx *fxw) (Attachment, error) {
	if err := ctx.Err(); err != nil {
		return Attachment{}, err
	}
	if err := validateIDs(a.Thread, a.Message, a.ID); err != nil {
		return Attachment{}, err
	}
	if a.Size < 0 {
		return Attachment{}, fmt.Errorf("attachment %s: %w: negative size", a.ID, ErrInvalidArgument)
	}
	h := s.hold(a.Thread)
	defer h.release()
	m, err := s.attachableMessage(ctx, a.Thread, a.Message)
	if err != nil {
		return Attachment{}, err
	}
	if taken, err := s.has(attachmentKey(a.Thread, a.Message, a.ID)); err != nil {
		return Attachment{}, err
	} else if taken {
		return Attachment{}, fmt.Errorf("attachment %s: %w", a.ID, ErrExists)
	}
	if owed, err := s.has(owedBlobKey(a.BlobName())); err != nil {
		return Attachment{}, err
	} else if owed {
		// The sweep took its blob for an orphan (orphans.go): it is being
		// removed, and no record may name it.
		return Attachment{}, fmt.Errorf("attachment %s: blob owed a removal: %w", a.ID, ErrPurgeInProgress)
	}
	if s.sealer != nil && a.Key != m.Key && m.Key != 0 {
		// The message was re-keyed between NewAttachment and now (it
		// cannot be, today): the blob is sealed under another key.
		return Attachment{}, fmt.Errorf("attachment %s: %w: sealed under key %d, the message's is %d", a.ID, ErrInvalidArgument, a.Key, m.Key)
	}
	a.CreatedTS, a.Deleted, a.DeletedTS = s.now().UnixNano(), false, 0
	b := s.db.NewBatch()
	if err := s.putAttachment(ctx, b, &a); err != nil {
		_ = b.Close()
		return Attachment{}, err
	}
	raise, err := s.raiseIn(b, FormatAttachments, "attachments")
	if err != nil {
		_ = b.Close()
		return Attachment{}, fmt.Errorf("add attachment %s: %w", a.ID, err)
	}
	w := write{kind: writeUser, batch: b, held: h}
	if fx != nil {
		w.effect, w.effectKind = fx.effect, fx.kind
	}
	if err := s.apply(ctx, w); err != nil {
		return Attachment{}, fmt.Errorf("add attachment %s: %w", a.ID, err)
	}
	s.noteRaise(raise)
	return a, nil
}

// sealedAttachment is what an attachment's record seals.
type sealedAttachment struct {
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type"`
	Filename    string `json:"filename"`
}

// putAttachment writes a's record, sealing its content fields under
// a.Key when the store seals (a.Key must then be set).
func (s *Store) putAttachment(ctx context.Context, b *pebble.Batch, a *Attachment) error {
	rec := *a
	rec.Sealed, rec.Unreadable = "", false
	if s.sealer != nil {
		if a.Key == 0 {
			return fmt.Errorf("attachment %s: %w: no key on a sealing store", a.ID, ErrInvalidArgument)
		}
		aead, err := s.sealer.KeyByNumber(ctx, a.Thread, a.Key)
		if keyGone(err) {
			return fmt.Errorf("attachment %s: %w", a.ID, ErrUnreadable)
		}
		if err != nil {
			return fmt.Errorf("attachment %s: %w", a.ID, err)
		}
		plain, err := json.Marshal(sealedAttachment{a.SHA256, a.ContentType, a.Filename})
		if err != nil {
			return fmt.Errorf("attachment %s: %w", a.ID, err)
		}
		rec.Sealed = seal(aead, plain, attachAD("meta", a.Thread, a.Message, a.ID, a.Key))
		clear(plain)
		rec.SHA256, rec.ContentType, rec.Filename = "", "", ""
	} else {
		rec.Key = 0
	}
	v, err := encode(rec)
	if err != nil {
		return err
	}
	a.Sealed = rec.Sealed
	return b.Set(attachmentKey(a.Thread, a.Message, a.ID), v, nil)
}

// decodeAttachment reads a record stored under key tid/mid/aid.
func decodeAttachment(tid, mid, aid string, v []byte) (Attachment, error) {
	var a Attachment
	if err := json.Unmarshal(v, &a); err != nil {
		return Attachment{}, fmt.Errorf("attachment %s: %w: %w", aid, ErrMalformed, err)
	}
	if a.ID != aid || a.Thread != tid || a.Message != mid {
		return Attachment{}, fmt.Errorf("attachment %s: %w: names %s/%s/%s", aid, ErrMalformed, a.Thread, a.Message, a.ID)
	}
	return a, nil
}

// openAttachment unseals a's content fields; a whose key is gone is
// marked Unreadable.
func (s *Store) openAttachment(ctx context.Context, a *Attachment) error {
	if a.Sealed == "" {
		return nil
	}
	a.SHA256, a.ContentType, a.Filename = "", "", ""
	aead, err := s.openKey(ctx, a.Thread, a.Key)
	if err != nil {
		return fmt.Errorf("open attachment %s: %w", a.ID, err)
	}
	if aead == nil {
		a.Unreadable = true
		return nil
	}
	plain, ok := unseal(aead, a.Sealed, attachAD("meta", a.Thread, a.Message, a.ID, a.Key))
	if !ok {
		a.Unreadable = true
		return nil
	}
	var f sealedAttachment
	err = json.Unmarshal(plain, &f)
	clear(plain)
	if err != nil {
		return fmt.Errorf("attachment %s: %w: sealed content", a.ID, ErrMalformed)
	}
	a.SHA256, a.ContentType, a.Filename = f.SHA256, f.ContentType, f.Filename
	return nil
}

// AttachmentKey returns the key that wraps a sealed attachment's blob
// (with AttachmentBlobAD); nil for a plain one. ErrUnreadable when the
// key is gone.
func (s *Store) AttachmentKey(ctx context.Context, a Attachment) (cipher.AEAD, error) {
	if a.Key == 0 {
		return nil, nil
	}
	if s.sealer == nil {
		return nil, fmt.Errorf("attachment %s: %w", a.ID, ErrSealedNeedsKEK)
	}
	aead, err := s.sealer.KeyByNumber(ctx, a.Thread, a.Key)
	if keyGone(err) {
		return nil, fmt.Errorf("attachment %s: %w", a.ID, ErrUnreadable)
	}
	if err != nil {
		return nil, fmt.Errorf("attachment %s: %w", a.ID, err)
	}
	return aead, nil
}

// GetAttachment returns attachment aid of message mid in thread tid,
// opened (deleted ones too: the caller decides what to show).
func (s *Store) GetAttachment(ctx context.Context, tid, mid, aid string) (Attachment, error) {
	if err := validateIDs(tid, mid, aid); err != nil {
		return Attachment{}, err
	}
	a, err := s.readAttachment(tid, mid, aid)
	if err != nil {
		return Attachment{}, err
	}
	return a, s.openAttachment(ctx, &a)
}

func (s *Store) readAttachment(tid, mid, aid string) (Attachment, error) {
	v, closer, err := s.db.Get(attachmentKey(tid, mid, aid))
	if errors.Is(err, pebble.ErrNotFound) {
		return Attachment{}, fmt.Errorf("attachment %s of message %s: %w", aid, mid, ErrNotFound)
	}
	if err != nil {
		return Attachment{}, fmt.Errorf("read attachment %s: %w", aid, err)
	}
	defer closer.Close()
	return decodeAttachment(tid, mid, aid, v)
}

// ListAttachments returns message mid's attachments in upload order,
// opened; soft-deleted ones only with includeDeleted.
func (s *Store) ListAttachments(ctx context.Context, tid, mid string, includeDeleted bool) ([]Attachment, error) {
	if err := validateIDs(tid, mid); err != nil {
		return nil, err
	}
	out := []Attachment{}
	err := s.ScanAttachments(ctx, tid, mid, func(a Attachment) error {
		if a.Deleted && !includeDeleted {
			return nil
		}
		if err := s.openAttachment(ctx, &a); err != nil {
			return err
		}
		out = append(out, a)
		return nil
	})
	return out, err
}

// ScanAttachments calls fn with every attachment record of message mid of
// thread tid, or of the whole thread when mid is "", deleted ones
// included, in key order, unopened (content fields of sealed ones empty:
// retention needs IDs, sizes and blob names, not content). A record that
// does not decode is ErrMalformed. Its cost follows the attachments
// found, never the size of the database.
func (s *Store) ScanAttachments(ctx context.Context, tid, mid string, fn func(Attachment) error) error {
	return scanAttachments(ctx, s.db, tid, mid, fn)
}

// scanAttachments is ScanAttachments on r (the store or a snapshot).
func scanAttachments(ctx context.Context, r pebble.Reader, tid, mid string, fn func(Attachment) error) error {
	if err := ValidateID(tid); err != nil {
		return err
	}
	if mid != "" {
		if err := ValidateID(mid); err != nil {
			return err
		}
	}
	prefix := attachmentPrefix(tid, mid)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upperBound(prefix)})
	if err != nil {
		return fmt.Errorf("scan attachments of %s: %w", tid, err)
	}
	defer it.Close()
	return eachAttachment(ctx, it, tid, prefix, fn)
}

// eachAttachment calls fn with every attachment record of thread tid
// under prefix (the thread's or one message's attachment prefix), seeking
// it there and leaving it past them. A record that does not decode is
// ErrMalformed.
func eachAttachment(ctx context.Context, it *pebble.Iterator, tid string, prefix []byte, fn func(Attachment) error) error {
	threadAtt := len(attachmentPrefix(tid, ""))
	for valid := it.SeekGE(prefix); valid && bytes.HasPrefix(it.Key(), prefix); valid = it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		rest := it.Key()[threadAtt:]
		i := bytes.IndexByte(rest, ':')
		if i <= 0 {
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("scan attachments of %s: %w", tid, err)
		}
		a, err := decodeAttachment(tid, string(rest[:i]), string(rest[i+1:]), v)
		if err != nil {
			return err
		}
		if err := fn(a); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("scan attachments of %s: %w", tid, err)
	}
	return nil
}

// DeleteAttachment soft-deletes an attachment (deleted, deleted_ts);
// deleting a deleted one keeps its first deleted_ts. Its blob stays until
// retention purges it.
func (s *Store) DeleteAttachment(ctx context.Context, tid, mid, aid string) (Attachment, error) {
	return s.setAttachmentDeleted(ctx, tid, mid, aid, true)
}

// RestoreAttachment undoes DeleteAttachment; ErrPurgeInProgress once a
// purge of its message or thread began.
func (s *Store) RestoreAttachment(ctx context.Context, tid, mid, aid string) (Attachment, error) {
	return s.setAttachmentDeleted(ctx, tid, mid, aid, false)
}

func (s *Store) setAttachmentDeleted(ctx context.Context, tid, mid, aid string, deleted bool) (Attachment, error) {
	if err := ctx.Err(); err != nil {
		return Attachment{}, err
	}
	if err := validateIDs(tid, mid, aid); err != nil {
		return Attachment{}, err
	}
	op := "restore"
	if deleted {
		op = "delete"
	}
	h := s.hold(tid)
	defer h.release()
	a, err := s.readAttachment(tid, mid, aid)
	if err != nil {
		return Attachment{}, err
	}
	if a.Deleted == deleted {
		return a, s.openAttachment(ctx, &a)
	}
	if err := s.refusePurging(ctx, tid, op+" attachment in thread"); err != nil {
		return Attachment{}, err
	}
	if err := s.refuseClaimed(mid, op+" attachment of"); err != nil {
		return Attachment{}, err
	}
	if a.PurgeRun != "" {
		return Attachment{}, fmt.Errorf("%s attachment %s: %w", op, aid, ErrPurgeInProgress)
	}
	b := s.db.NewBatch()
	// The deletion index changes in the same batch as the record, so that
	// retention finds every deleted attachment and no restored one.
	if a.Deleted {
		_ = b.Delete(attachmentDeletionKey(a.DeletedTS, tid, mid, aid), nil)
	}
	a.Deleted, a.DeletedTS = deleted, 0
	if deleted {
		a.DeletedTS = s.now().UnixNano()
	}
	// The sealed fields do not change: the record keeps its seal, whose
	// associated data binds no flag.
	if deleted {
		_ = b.Set(attachmentDeletionKey(a.DeletedTS, tid, mid, aid), nil, nil)
	}
	v, err := encode(a)
	if err != nil {
		_ = b.Close()
		return Attachment{}, err
	}
	_ = b.Set(attachmentKey(tid, mid, aid), v, nil)
	if err := s.apply(ctx, write{kind: writeUser, batch: b, held: h}); err != nil {
		return Attachment{}, fmt.Errorf("%s attachment %s: %w", op, aid, err)
	}
	return a, s.openAttachment(ctx, &a)
}
