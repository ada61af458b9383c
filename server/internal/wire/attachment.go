package wire

import "github.com/progressdb/progressdb/server/pkg/store"

// Attachment is an attachment's metadata on the wire (spec §16).
// sha256, content_type and filename are null when the attachment is
// sealed and its key is gone (spec §12), and filename when none was
// given; deleted_ts is null unless it is soft-deleted.
type Attachment struct {
	AttachmentID string  `json:"attachment_id"`
	Thread       string  `json:"thread"`
	Message      string  `json:"message"`
	Size         int64   `json:"size"`
	SHA256       *string `json:"sha256"`
	ContentType  *string `json:"content_type"`
	Filename     *string `json:"filename"`
	CreatedTS    Time    `json:"created_ts"`
	Deleted      bool    `json:"deleted"`
	DeletedTS    Time    `json:"deleted_ts"`
}

// AttachmentOf shows a stored attachment.
func AttachmentOf(a store.Attachment) Attachment {
	out := Attachment{
		AttachmentID: a.ID, Thread: a.Thread, Message: a.Message, Size: a.Size,
		CreatedTS: Nanos(a.CreatedTS), Deleted: a.Deleted, DeletedTS: Nanos(a.DeletedTS),
	}
	if !a.Unreadable {
		out.SHA256, out.ContentType = &a.SHA256, &a.ContentType
		if a.Filename != "" {
			out.Filename = &a.Filename
		}
	}
	return out
}

// Attachments shows stored attachments; never nil.
func Attachments(as []store.Attachment) []Attachment {
	out := make([]Attachment, len(as))
	for i, a := range as {
		out[i] = AttachmentOf(a)
	}
	return out
}
