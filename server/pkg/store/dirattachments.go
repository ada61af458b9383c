package store

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/pebbledir"
)

// DirAttachments calls fn with every attachment record of the database
// at dir (a backup's checkpoint), opened read-only, thread by thread in
// key order, unopened like ScanAttachments (a backup needs blob names,
// not content). It seeks to each thread's attachments and past the rest
// of the thread, so its cost follows the threads and attachments, not
// the messages. A record that does not decode is ErrMalformed.
func DirAttachments(ctx context.Context, dir string, fn func(Attachment) error) error {
	db, err := pebbledir.OpenReadOnly(dir)
	if err != nil {
		return fmt.Errorf("attachments of %s: open: %w", dir, err)
	}
	defer db.Close()
	return eachThreadIn(ctx, db, []byte(threadNS), func(it *pebble.Iterator, tid string) (bool, error) {
		return false, eachAttachment(ctx, it, tid, attachmentPrefix(tid, ""), fn)
	})
}
