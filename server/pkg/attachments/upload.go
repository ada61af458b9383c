package attachments

import (
	"context"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

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
	if b.replicating(st) {
		return b.uploadReplicated(ctx, st, up, seal)
	}
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

// uploadReplicated is Upload on a replicated shard's file:// store
// (replicate.go): the bytes as stored go through the group's log in
// chunks into a temporary file on every replica, and the record's
// command moves it into place everywhere before its batch.
func (b *Blobs) uploadReplicated(ctx context.Context, st *store.Store, up Upload, seal store.AttachmentSeal) (store.Attachment, error) {
	a := seal.Attachment
	temp := tempName(a.BlobName())
	gen := st.Checkpoints() // before the first chunk (resend.go)
	c := &chunker{ctx: ctx, st: st, name: temp, buf: make([]byte, 0, ChunkSize)}
	size, sum, err := stream(c, up, seal.AEAD, store.AttachmentBlobAD(a), c.flush)
	if err != nil {
		// Whatever reached the replicas is an upload's leftover: gone
		// now, or (leadership lost) taken by the orphan sweep later.
		return store.Attachment{}, errors.Join(err, b.dropTemp(ctx, st, temp, c.off))
	}
	a.Size, a.SHA256, a.ContentType, a.Filename = size, sum, up.ContentType, up.Filename
	commit := blobEffect{op: opCommit, name: temp, off: c.off, to: a.BlobName()}
	rec, err := st.AddAttachmentWith(ctx, a, store.EffectBlobs, commit.encode())
	if err != nil && !errors.Is(err, store.ErrAmbiguous) {
		// Refused before it was proposed, or never applied.
		return store.Attachment{}, errors.Join(err, b.dropTemp(ctx, st, temp, c.off))
	}
	if err == nil {
		// The upload is stored: a follower the resend misses lacks the
		// blob alone, and says so (attachment_blob_incomplete).
		if rerr := b.resendMissed(ctx, st, commit, gen); rerr != nil {
			st.Logger().Warn("attachment_resend_failed", "blob", a.BlobName(), "err", rerr)
		}
	}
	return rec, err
}

// dropTemp deletes an upload's temporary file on every replica, if any
// chunk of it was written.
func (b *Blobs) dropTemp(ctx context.Context, st *store.Store, temp string, written int64) error {
	if written == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropTimeout)
	defer cancel()
	if err := b.deleteReplicated(ctx, st, temp); err != nil && !errors.Is(err, store.ErrNotLeader) {
		return err
	}
	return nil
}

// dropTimeout bounds the deletion of a failed upload's temporary file.
const dropTimeout = 10 * time.Second

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
	n, sum, err := stream(w, up, wrap, ad, nil)
	if err != nil {
		return fail(err)
	}
	if err := w.Close(); err != nil {
		return 0, "", fmt.Errorf("%w: complete blob: %w", ErrUnavailable, err)
	}
	if err := b.syncFile(name); err != nil {
		_ = b.Delete(context.WithoutCancel(ctx), name)
		return 0, "", err
	}
	return n, sum, nil
}

// stream copies the body into w, sealed under wrap when it is set, then
// calls end (when set) once every byte is in w, and returns the
// plaintext's size and SHA-256.
func stream(w io.Writer, up Upload, wrap cipher.AEAD, ad []byte, end func() error) (int64, string, error) {
	dst := w
	var sw *sealstream.Writer
	if wrap != nil {
		var err error
		if sw, err = sealstream.NewWriter(w, wrap, ad); err != nil {
			return 0, "", err
		}
		dst = sw
	}
	h := sha256.New()
	n, err := copyLimited(io.MultiWriter(dst, h), up.Body, up.MaxBytes)
	if err != nil {
		return 0, "", err
	}
	if sw != nil {
		if err := sw.Close(); err != nil {
			return 0, "", err
		}
	}
	if end != nil {
		if err := end(); err != nil {
			return 0, "", err
		}
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
