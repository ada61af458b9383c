package store

import (
	"bytes"
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
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(threadNS), UpperBound: upperBound([]byte(threadNS))})
	if err != nil {
		return fmt.Errorf("attachments of %s: %w", dir, err)
	}
	defer it.Close()
	for valid := it.First(); valid; {
		if err := ctx.Err(); err != nil {
			return err
		}
		tid, _, ok := parseThreadKey(it.Key())
		if !ok {
			valid = it.Next()
			continue
		}
		prefix := attachmentPrefix(tid, "")
		for valid = it.SeekGE(prefix); valid && bytes.HasPrefix(it.Key(), prefix); valid = it.Next() {
			rest := it.Key()[len(prefix):]
			i := bytes.IndexByte(rest, ':')
			if i <= 0 {
				continue
			}
			v, err := it.ValueAndErr()
			if err != nil {
				return fmt.Errorf("attachments of %s: %w", dir, err)
			}
			a, err := decodeAttachment(tid, string(rest[:i]), string(rest[i+1:]), v)
			if err != nil {
				return err
			}
			if err := fn(a); err != nil {
				return err
			}
		}
		valid = it.SeekGE(upperBound(threadPrefix(tid)))
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("attachments of %s: %w", dir, err)
	}
	return nil
}
