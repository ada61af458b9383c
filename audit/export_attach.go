package audit

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// An export record holds the attachments of the item it exports (spec
// §16) after its messages, each with its metadata and its bytes:
//
//	,"attachments":[{"id":…,"thread":…,"message":…,"size":…,…,"data":"<base64>"}]
//
// The bytes are streamed into the line through a base64 encoder, so an
// attachment of any size passes through bounded memory when it is
// written. A record without attachments has no such field, as before.

// AttachmentMeta is an attachment's metadata as the store keeps it, in
// the plain shape when the export could open it (Key and Sealed empty),
// as stored when its key was gone (then its bytes are not exported).
//
// It repeats the fields of the store's record (store.Attachment) on
// purpose: audit is read by backup tooling that must not pull in the
// store and Pebble, and the export file is a contract of its own that a
// new field of the store's record must not join unnoticed. Retention's
// exportMeta converts one into the other, and a test there fails when
// the two drift apart.
type AttachmentMeta struct {
	ID          string `json:"id"`
	Thread      string `json:"thread"`
	Message     string `json:"message"`
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	Filename    string `json:"filename,omitempty"`
	CreatedTS   int64  `json:"created_ts"`
	Deleted     bool   `json:"deleted"`
	DeletedTS   int64  `json:"deleted_ts"`
	Key         uint32 `json:"key,omitempty"`
	Sealed      string `json:"sealed,omitempty"`
}

// ExportAttachment is one exported attachment. Data holds its bytes, or
// is nil (null in the file) when they could not be exported: the blob
// was already gone, or it is sealed under a key that no longer exists.
type ExportAttachment struct {
	AttachmentMeta
	Data []byte `json:"data"`
}

// attachChunk is how much of an attachment is copied at a time.
const attachChunk = 32 << 10

// Attachment writes one attachment of the record, after its messages:
// the metadata, then data (nil: null) base64-encoded as it is read. An
// error reading data leaves the record unfinished: the caller aborts it.
func (e *RecordEncoder) Attachment(m AttachmentMeta, data io.Reader) error {
	switch e.state {
	case encThread:
		_ = e.Thread(nil)
		e.write([]byte(`],"attachments":[`))
	case encMessages:
		e.write([]byte(`],"attachments":[`))
	case encVersions:
		e.write([]byte(`]}],"attachments":[`))
	case encAttachments:
		e.write([]byte{','})
	default:
		e.setErr(fmt.Errorf("audit: %w: export attachment after end", ErrInvalidRecord))
	}
	e.state = encAttachments
	meta, err := json.Marshal(m)
	if err != nil {
		e.setErr(fmt.Errorf("audit: export attachment %s: %w", m.ID, err))
		return e.err
	}
	e.write(meta[:len(meta)-1]) // the object stays open for its data
	if data == nil {
		e.write([]byte(`,"data":null}`))
		return e.err
	}
	e.write([]byte(`,"data":"`))
	if e.err != nil {
		return e.err
	}
	b64 := base64.NewEncoder(base64.StdEncoding, e.w)
	buf := make([]byte, attachChunk)
	if _, err := io.CopyBuffer(b64, data, buf); err != nil {
		e.setErr(fmt.Errorf("audit: export attachment %s: %w", m.ID, err))
		return e.err
	}
	if err := b64.Close(); err != nil {
		e.setErr(err)
		return e.err
	}
	e.write([]byte(`"}`))
	return e.err
}

// NextAttachment returns the current record's next attachment, or io.EOF
// after its last one (messages not read yet are skipped). Each
// attachment's bytes are decoded whole: reading holds one attachment at
// a time.
func (r *ExportReader) NextAttachment() (ExportAttachment, error) {
	if r.err != nil {
		return ExportAttachment{}, r.err
	}
	if !r.pending {
		return ExportAttachment{}, io.EOF
	}
	for r.inMsgs {
		if _, err := r.NextMessage(); err != nil && !errors.Is(err, io.EOF) {
			return ExportAttachment{}, err
		}
	}
	if !r.inAtts {
		return ExportAttachment{}, io.EOF
	}
	if r.dec.More() {
		var a ExportAttachment
		if err := r.dec.Decode(&a); err != nil {
			return a, r.problem("attachment", err)
		}
		return a, nil
	}
	if err := r.delim(']'); err != nil {
		return ExportAttachment{}, err
	}
	r.inAtts = false
	if err := r.rest(); err != nil {
		return ExportAttachment{}, err
	}
	return ExportAttachment{}, io.EOF
}
