package attachments

import (
	"context"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"gocloud.dev/blob"

	"github.com/progressdb/progressdb/server/pkg/sealstream"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// ErrTooLarge: an upload went over the limit; nothing was stored. The
// error is a *TooLargeError naming the limit.
var ErrTooLarge = errors.New("attachment too large")

// ErrReadBody: the upload's body could not be read to its end (the
// client went away, or sent less than it declared); nothing was stored.
var ErrReadBody = errors.New("upload body ended before it was complete")

// TooLargeError names the limit an upload went over.
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("attachment too large: the limit is %d bytes (PROGRESSDB_ATTACHMENT_MAX_BYTES)", e.Limit)
}

func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// Upload is one file to attach.
type Upload struct {
	Thread, Message string
	Body            io.Reader
	ContentType     string
	Filename        string
	// MaxBytes is the largest file stored (PROGRESSDB_ATTACHMENT_MAX_BYTES).
	MaxBytes int64
	// DeclaredSize is the body's length when the client said it
	// (Content-Length), else -1: a declared size over MaxBytes is
	// refused before a byte is read.
	DeclaredSize int64
}

// copyBuffer is what an upload reads at a time; with the sealer's segment
// (two 64 KiB buffers) it is all an upload holds in this process.
const copyBuffer = 32 << 10

// s3PartSize is the part the S3 driver buffers (the protocol's smallest
// part but the last), uploaded one at a time.
const s3PartSize = 5 << 20

// Upload streams up.Body into a new blob and records it as an attachment
// of its message once the blob is complete, sealed first when st seals.
// The order is what makes a cut-off upload store nothing a listing shows:
// the blob exists under its name only once complete (fileblob renames a
// finished temporary file; S3 completes a multipart upload on Close; a
// cancelled writer leaves no object), and its record is written after.
// A crash between the two leaves a blob without a record: an orphan that
// retention removes after a grace period (docs/attachments.md).
func (b *Blobs) Upload(ctx context.Context, st *store.Store, up Upload) (store.Attachment, error) {
	if up.MaxBytes <= 0 {
		return store.Attachment{}, fmt.Errorf("attachments: MaxBytes %d: %w", up.MaxBytes, store.ErrInvalidArgument)
	}
	if up.DeclaredSize > up.MaxBytes {
		return store.Attachment{}, &TooLargeError{up.MaxBytes}
	}
	seal, err := st.NewAttachment(ctx, up.Thread, up.Message)
	if err != nil {
		return store.Attachment{}, err
	}
	a := seal.Attachment
	defer b.track(a.BlobName())()
	size, sum, err := b.write(ctx, a.BlobName(), up, seal.AEAD, store.AttachmentBlobAD(a))
	if err != nil {
		return store.Attachment{}, err
	}
	a.Size, a.SHA256, a.ContentType, a.Filename = size, sum, up.ContentType, up.Filename
	rec, err := st.AddAttachment(ctx, a)
	if err != nil {
		// The message went away (or the thread's purge began) while the
		// bytes streamed in: the blob is no one's.
		if derr := b.Delete(context.WithoutCancel(ctx), a.BlobName()); derr != nil {
			err = errors.Join(err, derr)
		}
		return store.Attachment{}, err
	}
	return rec, nil
}

// write streams the body into blob name (sealed under wrap when it is
// set) and returns the plaintext's size and SHA-256. On any failure the
// writer's context is cancelled before it is closed, so nothing is left
// under name.
func (b *Blobs) write(ctx context.Context, name string, up Upload, wrap cipher.AEAD, ad []byte) (int64, string, error) {
	bucket, err := b.open()
	if err != nil {
		return 0, "", err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := bucket.NewWriter(wctx, name, &blob.WriterOptions{
		ContentType:    "application/octet-stream", // what it is lives in the store
		BufferSize:     s3PartSize,
		MaxConcurrency: 1,
	})
	if err != nil {
		return 0, "", fmt.Errorf("%w: new blob: %w", ErrUnavailable, err)
	}
	fail := func(err error) (int64, string, error) {
		cancel()
		_ = w.Close()
		return 0, "", err
	}
	var dst io.Writer = w
	var sw *sealstream.Writer
	if wrap != nil {
		if sw, err = sealstream.NewWriter(w, wrap, ad); err != nil {
			return fail(err)
		}
		dst = sw
	}
	h := sha256.New()
	n, err := copyLimited(io.MultiWriter(dst, h), up.Body, up.MaxBytes)
	if err != nil {
		return fail(err)
	}
	if sw != nil {
		if err := sw.Close(); err != nil {
			return fail(err)
		}
	}
	if err := w.Close(); err != nil {
		return 0, "", fmt.Errorf("%w: complete blob: %w", ErrUnavailable, err)
	}
	if err := b.syncFile(name); err != nil {
		_ = b.Delete(context.WithoutCancel(ctx), name)
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// copyLimited copies src to dst, failing with a *TooLargeError as soon as
// more than limit bytes came.
func copyLimited(dst io.Writer, src io.Reader, limit int64) (int64, error) {
	buf := make([]byte, copyBuffer)
	var n int64
	for {
		m, rerr := src.Read(buf)
		if m > 0 {
			if n+int64(m) > limit {
				return n, &TooLargeError{limit}
			}
			if _, err := dst.Write(buf[:m]); err != nil {
				return n, err
			}
			n += int64(m)
		}
		if errors.Is(rerr, io.EOF) {
			return n, nil
		}
		if rerr != nil {
			return n, fmt.Errorf("%w: %w", ErrReadBody, rerr)
		}
	}
}
