package attachments

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"gocloud.dev/gcerrors"

	"github.com/progressdb/progressdb/server/pkg/sealstream"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// ErrRange: a range outside the attachment.
var ErrRange = sealstream.ErrRange

// ErrBlobMissing: the attachment is recorded and its blob is not in the
// store (deleted by hand, or a store that lost it).
var ErrBlobMissing = errors.New("attachment's blob is missing from the attachments store")

// OpenRange returns bytes [off, off+n) of attachment a, opened (a sealed
// one segment by segment, reading only the segments that cover the
// range). store.ErrUnreadable when a sealed attachment's key is gone;
// sealstream.ErrCorrupt, from the reader, when its blob was altered.
func (b *Blobs) OpenRange(ctx context.Context, st *store.Store, a store.Attachment, off, n int64) (io.ReadCloser, error) {
	if off < 0 || n < 0 || off > a.Size || n > a.Size-off {
		return nil, fmt.Errorf("%w: bytes %d+%d of %d", ErrRange, off, n, a.Size)
	}
	bucket, err := b.open()
	if err != nil {
		return nil, err
	}
	name := a.BlobName()
	open := func(ctx context.Context, off, n int64) (io.ReadCloser, error) {
		r, err := bucket.NewRangeReader(ctx, name, off, n, nil)
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, fmt.Errorf("%w: %s", ErrBlobMissing, name)
		}
		if err != nil {
			return nil, fmt.Errorf("open blob %s: %w", name, err)
		}
		return r, nil
	}
	wrap, err := st.AttachmentKey(ctx, a)
	if err != nil {
		return nil, err
	}
	if wrap != nil {
		return sealstream.OpenRange(ctx, open, wrap, store.AttachmentBlobAD(a), a.Size, off, n)
	}
	if n == 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	r, err := open(ctx, off, n)
	if err != nil {
		return nil, err
	}
	return &exactReader{r: r, left: n}, nil
}

// exactReader fails when a plain blob ends before the recorded size: a
// truncated file must not pass for a complete answer.
type exactReader struct {
	r    io.ReadCloser
	left int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if errors.Is(err, io.EOF) && e.left > 0 {
		return n, fmt.Errorf("blob shorter than recorded: %w", io.ErrUnexpectedEOF)
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

func (e *exactReader) Close() error { return e.r.Close() }
