package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Owed blob deletions (spec §16): a purge that deletes an attachment's
// record writes, in the same batch, what its blob deletion owes:
//
//	sys:blob:<tid>/<mid>/<aid>   an owed blob deletion (JSON OwedBlob)
//
// The record and the debt change together or not at all, so a run killed
// between the metadata and the blob deletion leaves the debt, and the
// next run deletes the blob and records it (retention's blob step). The
// debt goes once the blob is gone and its audit record is synced.
const owedBlobNS = "sys:blob:"

// OwedBlob is a blob the store owes a deletion of: the attachment whose
// record a purge deleted, and the purge that did.
type OwedBlob struct {
	Name    string `json:"name"` // BlobName
	Thread  string `json:"thread"`
	Message string `json:"message"`
	ID      string `json:"id"`
	Size    int64  `json:"size"`
	// SHA256 is the file's digest when the purge could read it; empty for
	// a sealed attachment whose key was destroyed before (a shredded
	// thread's), whose bytes no key opens any more.
	SHA256 string `json:"sha256,omitempty"`
	// RunID and Cause are the purge's (PurgeOptions.Marker); PurgedTS when
	// the record was deleted, DeletedTS the attachment's own soft delete.
	RunID     string `json:"run_id,omitempty"`
	Cause     string `json:"cause,omitempty"`
	DeletedTS int64  `json:"deleted_ts,omitempty"`
	PurgedTS  int64  `json:"purged_ts"`
	Shredded  bool   `json:"shredded,omitempty"`
	Replayed  bool   `json:"replayed,omitempty"`
	// Orphan: no record named the blob (orphans.go); Name may then be
	// an upload's leftover of it (a temporary file), and Size and SHA256
	// are those of the bytes as stored (sealed ones when sealing).
	Orphan bool `json:"orphan,omitempty"`
	// Upload is an orphan S3 multipart upload's ID: the removal aborts
	// it (Name is then <blob>.upload-<digest of the ID>, apart from the
	// blob's own debt).
	Upload string `json:"upload,omitempty"`
}

func owedBlobKey(name string) []byte { return append([]byte(owedBlobNS), name...) }

// isAttachmentKey reports whether rest, a key of a thread after its
// prefix, is an attachment record (att:<mid>:<aid>).
func isAttachmentKey(rest []byte) bool { return bytes.HasPrefix(rest, []byte(attSuffix)) }

// attachment deletes the attachment record at key (value v) of thread tid
// and owes its blob's deletion, in one batch. A record that does not
// decode is still deleted with its thread (its blob name is unknown; the
// orphan sweep finds the blob).
func (p *purger) attachment(tid string, key, v []byte) error {
	if err := p.room(3); err != nil {
		return err
	}
	rest := key[len(attachmentPrefix(tid, "")):]
	i := bytes.IndexByte(rest, ':')
	if i <= 0 {
		p.del(key, true)
		return nil
	}
	a, err := decodeAttachment(tid, string(rest[:i]), string(rest[i+1:]), v)
	if err != nil {
		p.del(key, true)
		return nil
	}
	debt, err := p.owe(a)
	if err != nil {
		return err
	}
	_ = p.b.Set(owedBlobKey(a.BlobName()), debt, nil)
	if a.Deleted {
		p.del(attachmentDeletionKey(a.DeletedTS, a.Thread, a.Message, a.ID), false)
	}
	p.del(key, true)
	p.owedBlobs++
	return nil
}

// owe makes the debt of attachment a's blob, encoded.
func (p *purger) owe(a Attachment) ([]byte, error) {
	return p.s.encodeDebt(p.ctx, a, p.marker, p.shredded)
}

// encodeDebt makes the debt of attachment a's blob for purge m, encoded.
func (s *Store) encodeDebt(ctx context.Context, a Attachment, m PurgeMarker, shredded bool) ([]byte, error) {
	debt := OwedBlob{Name: a.BlobName(), Thread: a.Thread, Message: a.Message, ID: a.ID, Size: a.Size,
		SHA256: a.SHA256, RunID: m.RunID, Cause: m.Cause, DeletedTS: a.DeletedTS,
		PurgedTS: s.now().UnixNano(), Shredded: shredded, Replayed: m.Replayed}
	if a.Sealed != "" && !shredded {
		// The digest is sealed with the record: read it while the key is
		// there, for the audit record.
		if err := s.openAttachment(ctx, &a); err != nil {
			return nil, err
		}
		debt.SHA256 = a.SHA256
	}
	if prev, ok, err := s.owedBlob(debt.Name); err != nil {
		return nil, err
	} else if ok && prev.SHA256 != "" && debt.SHA256 == "" {
		debt.SHA256 = prev.SHA256 // an interrupted purge's debt knew more
	}
	return encode(debt)
}

// purgeAttachments deletes message mid's attachment records, owing their
// blobs, before the message's own keys go: a purge interrupted in between
// leaves the message, and the next run finishes it.
func (p *purger) purgeAttachments(tid, mid string) error {
	prefix := attachmentPrefix(tid, mid)
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upperBound(prefix)})
	if err != nil {
		return err
	}
	defer it.Close()
	spanned := p.shredded || p.erase == nil
	for valid := it.First(); valid; valid = it.Next() {
		if !spanned {
			// The records' filenames and types are content: the erase
			// step removes them from the files, like a thread's span.
			p.erase.add(prefix, upperBound(prefix))
			spanned = true
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("read %s: %w", it.Key(), err)
		}
		if err := p.attachment(tid, bytes.Clone(it.Key()), bytes.Clone(v)); err != nil {
			return err
		}
	}
	return it.Error()
}

func (s *Store) owedBlob(name string) (OwedBlob, bool, error) {
	v, closer, err := s.db.Get(owedBlobKey(name))
	if err == pebble.ErrNotFound {
		return OwedBlob{}, false, nil
	}
	if err != nil {
		return OwedBlob{}, false, fmt.Errorf("read owed blob %s: %w", name, err)
	}
	defer closer.Close()
	var d OwedBlob
	if json.Unmarshal(v, &d) != nil {
		return OwedBlob{}, false, nil
	}
	return d, true, nil
}

// OwedBlobs lists the blob deletions owed, in name order. Entries that do
// not decode, or that name another blob than their key, are left out.
func (s *Store) OwedBlobs(ctx context.Context) ([]OwedBlob, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ns := []byte(owedBlobNS)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: ns, UpperBound: upperBound(ns)})
	if err != nil {
		return nil, fmt.Errorf("owed blobs: %w", err)
	}
	defer it.Close()
	var out []OwedBlob
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("owed blobs: %w", err)
		}
		var d OwedBlob
		if json.Unmarshal(v, &d) != nil || string(it.Key()[len(ns):]) != d.Name || !validOwedName(d) {
			continue
		}
		out = append(out, d)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("owed blobs: %w", err)
	}
	return out, nil
}

// ClearOwedBlobs removes debts (synced) once their blobs are deleted and
// their audit records durable.
func (s *Store) ClearOwedBlobs(ctx context.Context, ds []OwedBlob) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(ds) == 0 {
		return nil
	}
	b := s.db.NewBatch()
	for _, d := range ds {
		_ = b.Delete(owedBlobKey(d.Name), nil)
	}
	if err := s.apply(ctx, write{kind: writeState, batch: b, sync: true}); err != nil {
		return fmt.Errorf("clear owed blobs: %w", err)
	}
	return nil
}
