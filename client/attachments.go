package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Attachments (spec §16): files attached to messages, streamed both ways.
// An upload's body is the caller's reader, read as it is sent and never
// held whole in memory; a download's body is the server's answer as it
// arrives.

// UploadOptions shape an upload.
type UploadOptions struct {
	// ContentType is the type the file is served back with
	// ("application/octet-stream" when empty).
	ContentType string
	// Filename is shown back and given in Content-Disposition; optional.
	Filename string
	// Size is the file's length, sent as Content-Length; 0 when unknown,
	// then taken from the reader when it tells (a Len method, as
	// bytes.Reader has, or an io.Seeker such as *os.File), else the file
	// goes chunked. A declared length over the server's limit is refused
	// before a byte is sent.
	Size int64
	// GetBody returns the same bytes again from their start (e.g. by
	// opening the file again), so that a retry can send them; without
	// it only a reader that is an io.Seeker is sent again.
	GetBody func() (io.Reader, error)
}

// UploadAttachment attaches the bytes r yields to a live message. r is
// read as the request is sent, never held in memory; r is not closed.
// An answer the client retries (503, 421) sends the file again only when
// none of r was read yet (with a known length, the server refuses before
// asking for the body) or r can be had again from its start (opts.GetBody, or an io.Seeker,
// rewound to where it stood); otherwise the answer is returned. A file
// over the server's limit is an error IsTooLarge reports, and nothing is
// stored; so is an upload cut off part way (an error of r is returned,
// wrapped).
func (c *Client) UploadAttachment(ctx context.Context, tid, mid string, r io.Reader, opts UploadOptions) (*Attachment, error) {
	if r == nil {
		return nil, errors.New("progressdb: UploadAttachment: nil reader")
	}
	u, err := newUpload(ctx, r, opts)
	if err != nil {
		return nil, err
	}
	ct := opts.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	params := &UploadAttachmentParams{Filename: optional(opts.Filename)}
	res, err := c.raw.UploadAttachmentWithBodyWithResponse(ctx, tid, mid, params, ct, u.first, c.APIAuth(), u.edit)
	if err != nil {
		return nil, err
	}
	return result(res.JSON201, res.HTTPResponse, res.Body)
}

// errStreamRead: a retry would need the part of an upload already read,
// which the client does not hold.
var errStreamRead = errors.New("progressdb: the upload's reader was read and cannot be rewound")

// upload is an upload's body across the tries of one request.
type upload struct {
	ctx    context.Context
	src    io.Reader
	seeker io.Seeker // src, when it can be rewound to start
	start  int64
	again  func() (io.Reader, error)
	length int64 // -1: unknown

	mu    sync.Mutex
	cur   *uploadBody
	first io.ReadCloser
}

func newUpload(ctx context.Context, r io.Reader, opts UploadOptions) (*upload, error) {
	if opts.Size < 0 {
		return nil, fmt.Errorf("progressdb: UploadAttachment: Size %d is negative", opts.Size)
	}
	u := &upload{ctx: ctx, src: r, again: opts.GetBody, length: -1}
	if s, ok := r.(io.Seeker); ok {
		// A reader that only looks seekable (a pipe's *os.File) fails
		// here and is sent as a stream.
		if start, err := s.Seek(0, io.SeekCurrent); err == nil {
			if end, err := s.Seek(0, io.SeekEnd); err == nil {
				if _, err := s.Seek(start, io.SeekStart); err != nil {
					return nil, fmt.Errorf("progressdb: UploadAttachment: rewind the reader: %w", err)
				}
				u.seeker, u.start, u.length = s, start, max(end-start, 0)
			}
		}
	}
	if l, ok := r.(interface{ Len() int }); ok && u.length < 0 {
		u.length = int64(l.Len())
	}
	if opts.Size > 0 {
		u.length = opts.Size
	}
	u.cur = newUploadBody(r)
	u.first = u.cur
	return u, nil
}

// edit sets what the generated request cannot: the length, the way to
// have the body again and, with a declared length, Expect: 100-continue,
// so that a refusal (the size limit, a missing message, a shard being
// moved) comes before the file is sent, leaving a stream whole for a
// retry. A chunked upload goes without it: a Go server that stops
// reading a body it asked for with 100 Continue resets the connection
// instead of letting its answer (413 past the limit) be read.
func (u *upload) edit(_ context.Context, req *http.Request) error {
	switch {
	case u.length == 0:
		req.Body, req.ContentLength = http.NoBody, 0
		return nil
	case u.length > 0:
		req.ContentLength = u.length
		req.Header.Set("Expect", "100-continue")
	}
	req.GetBody = u.getBody
	return nil
}

// getBody is the body of the next try: the same reader when none of it
// was read, else the reader rewound or had again, else errStreamRead. It
// waits for the transport to close the previous try's body, after which
// nothing reads it (http.RoundTripper's contract).
func (u *upload) getBody() (io.ReadCloser, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	prev := u.cur
	select {
	case <-prev.closed:
	case <-u.ctx.Done():
		return nil, u.ctx.Err()
	}
	var r io.Reader
	switch {
	case !prev.read.Load():
		r = prev.r
	case u.again != nil:
		var err error
		if r, err = u.again(); err != nil {
			return nil, fmt.Errorf("progressdb: UploadOptions.GetBody: %w", err)
		}
	case u.seeker != nil:
		if _, err := u.seeker.Seek(u.start, io.SeekStart); err != nil {
			return nil, fmt.Errorf("progressdb: rewind the upload: %w", err)
		}
		r = u.src
	default:
		return nil, errStreamRead
	}
	u.cur = newUploadBody(r)
	return u.cur, nil
}

// uploadBody is one try's body: it tells whether it was read, and its
// Close leaves the caller's reader open.
type uploadBody struct {
	r      io.Reader
	read   atomic.Bool
	once   sync.Once
	closed chan struct{}
}

func newUploadBody(r io.Reader) *uploadBody {
	return &uploadBody{r: r, closed: make(chan struct{})}
}

func (b *uploadBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.r.Read(p)
}

func (b *uploadBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

// IsTooLarge reports whether err is the server's body_too_large: an
// upload over PROGRESSDB_ATTACHMENT_MAX_BYTES (the message names the
// limit), of which nothing was stored.
func IsTooLarge(err error) bool { return HasCode(err, ErrorCodeBodyTooLarge) }

// ListAttachments returns a message's attachments in upload order
// (soft-deleted ones too with includeDeleted).
func (c *Client) ListAttachments(ctx context.Context, tid, mid string, includeDeleted bool) ([]Attachment, error) {
	r, err := c.raw.ListAttachmentsWithResponse(ctx, tid, mid, &ListAttachmentsParams{IncludeDeleted: optional(includeDeleted)}, c.APIAuth())
	if err != nil {
		return nil, err
	}
	p, err := result(r.JSON200, r.HTTPResponse, r.Body)
	if err != nil {
		return nil, err
	}
	return p.Attachments, nil
}

// DeleteAttachment soft-deletes an attachment; retention purges its bytes.
func (c *Client) DeleteAttachment(ctx context.Context, tid, mid, aid string) error {
	r, err := c.raw.DeleteAttachmentWithResponse(ctx, tid, mid, aid, c.APIAuth())
	if err != nil {
		return err
	}
	return noContent(r.HTTPResponse, r.Body)
}

// RestoreAttachment restores a soft-deleted attachment (purge_in_progress
// once its message's or thread's purge began).
func (c *Client) RestoreAttachment(ctx context.Context, tid, mid, aid string) (*Attachment, error) {
	r, err := c.raw.RestoreAttachmentWithResponse(ctx, tid, mid, aid, c.APIAuth())
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// DownloadOptions shape a download.
type DownloadOptions struct {
	// Offset and Length ask for one byte range: Length bytes from Offset,
	// or to the end with Length 0. Both 0: the whole file.
	Offset, Length int64
	// IfNoneMatch is an ETag the caller holds (Download.ETag): when it is
	// the file's, the answer is Download.NotModified, without the bytes.
	IfNoneMatch string
	// IncludeDeleted downloads a soft-deleted attachment too.
	IncludeDeleted bool
}

// Download is an attachment's bytes as they arrive: read it, then Close
// it. A stream cut before its end fails with io.ErrUnexpectedEOF, never
// with io.EOF, so that a short file is never taken for the whole.
type Download struct {
	io.ReadCloser
	// ETag is the file's (its SHA-256, quoted), for IfNoneMatch.
	ETag string
	// ContentType and Filename are what the upload gave.
	ContentType, Filename string
	// Size is the whole file's length; Offset and Length place the bytes
	// of this answer in it (0 and Size without a range; -1 when a proxy
	// in between dropped Content-Length).
	Size, Offset, Length int64
	// Partial is true when the answer is the range asked for (206).
	Partial bool
	// NotModified is true when IfNoneMatch named the file: the body is
	// empty.
	NotModified bool
}

// DownloadAttachment streams an attachment, whole or one byte range.
// Answers the client retries (503, 421) are retried before the first
// byte arrives; a stream that breaks later is the caller's to ask for
// again (a range from the bytes it has).
func (c *Client) DownloadAttachment(ctx context.Context, tid, mid, aid string, opts DownloadOptions) (*Download, error) {
	params := &GetAttachmentParams{IncludeDeleted: optional(opts.IncludeDeleted), IfNoneMatch: optional(opts.IfNoneMatch)}
	switch {
	case opts.Offset < 0 || opts.Length < 0:
		return nil, fmt.Errorf("progressdb: DownloadAttachment: Offset %d, Length %d: want both >= 0", opts.Offset, opts.Length)
	case opts.Length > 0:
		params.Range = ptr(fmt.Sprintf("bytes=%d-%d", opts.Offset, opts.Offset+opts.Length-1))
	case opts.Offset > 0:
		params.Range = ptr(fmt.Sprintf("bytes=%d-", opts.Offset))
	}
	res, err := c.raw.GetAttachment(ctx, tid, mid, aid, params, c.APIAuth())
	if err != nil {
		return nil, err
	}
	d := &Download{ReadCloser: res.Body, ETag: res.Header.Get("ETag"), ContentType: res.Header.Get("Content-Type")}
	if _, p, err := mime.ParseMediaType(res.Header.Get("Content-Disposition")); err == nil {
		d.Filename = p["filename"]
	}
	switch res.StatusCode {
	case http.StatusNotModified:
		res.Body.Close()
		d.ReadCloser, d.NotModified = http.NoBody, true
		return d, nil
	case http.StatusOK:
		d.Size, d.Length = res.ContentLength, res.ContentLength
		return d, nil
	case http.StatusPartialContent:
		off, size, ok := contentRange(res.Header.Get("Content-Range"))
		if !ok {
			res.Body.Close()
			return nil, fmt.Errorf("progressdb: download: Content-Range %q is not one byte range", res.Header.Get("Content-Range"))
		}
		d.Offset, d.Size, d.Length, d.Partial = off, size, res.ContentLength, true
		return d, nil
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return nil, newAPIError(res, body)
}

// contentRange reads "bytes A-B/SIZE".
func contentRange(v string) (off, size int64, ok bool) {
	spec, found := strings.CutPrefix(v, "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, total, found := strings.Cut(spec, "/")
	first, _, found2 := strings.Cut(rng, "-")
	if !found || !found2 {
		return 0, 0, false
	}
	off, err1 := strconv.ParseInt(first, 10, 64)
	size, err2 := strconv.ParseInt(total, 10, 64)
	return off, size, err1 == nil && err2 == nil
}
