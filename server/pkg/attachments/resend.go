package attachments

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// An upload under way when a follower's snapshot was taken
// (docs/replication-design.md §14). The snapshot's state stands at an
// index between the upload's chunks, or between its last chunk and its
// record: the follower that installs it lacks the temporary file's
// earlier bytes, writes none of the later ones (no hole) and moves
// nothing at the commit. The leader sees that a snapshot was taken
// meanwhile (its store's checkpoints count changed: a snapshot's state
// is a checkpoint taken while the group applies nothing, so one that
// stands before the record counted before the record applied here) and,
// once the record applied, proposes the upload's chunks again from the
// blob as stored, then its commit. A replica whose blob is in place
// skips them; the follower rebuilds the temporary file from the first
// byte and moves it into place. A resend is after the snapshot's
// index, so it reaches the follower; a snapshot taken during a resend
// makes another one, at most maxResends.

// maxResends bounds the resends of one upload.
const maxResends = 3

// resendMissed re-sends the upload that commit completed when st took a
// checkpoint since gen.
func (b *Blobs) resendMissed(ctx context.Context, st *store.Store, commit blobEffect, gen uint64) error {
	for range maxResends {
		now := st.Checkpoints()
		if now == gen {
			return nil
		}
		gen = now
		if err := b.resend(ctx, st, commit); err != nil {
			return err
		}
	}
	if st.Checkpoints() != gen {
		return fmt.Errorf("blob %s: snapshots kept coming while it was sent again %d times", commit.to, maxResends)
	}
	return nil
}

// resend proposes the chunks of the blob commit completed, read from
// this replica's folder, then the commit. A blob gone meanwhile (its
// attachment purged) is not sent again.
func (b *Blobs) resend(ctx context.Context, st *store.Store, commit blobEffect) error {
	f, err := os.Open(filepath.Join(b.dir, filepath.FromSlash(commit.to)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("blob %s: %w", commit.to, err)
	}
	defer f.Close()
	c := &chunker{ctx: ctx, st: st, name: commit.name, buf: make([]byte, 0, ChunkSize)}
	if _, err := io.CopyBuffer(c, f, make([]byte, copyBuffer)); err != nil {
		return fmt.Errorf("blob %s: send again: %w", commit.to, err)
	}
	if err := c.flush(); err != nil {
		return fmt.Errorf("blob %s: send again: %w", commit.to, err)
	}
	if c.off != commit.off {
		return fmt.Errorf("blob %s: %d bytes in place, %d committed", commit.to, c.off, commit.off)
	}
	if err := st.ProposeEffect(ctx, store.EffectBlobs, commit.encode()); err != nil {
		return fmt.Errorf("blob %s: commit again: %w", commit.to, err)
	}
	return nil
}
