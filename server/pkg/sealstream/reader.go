package sealstream

import (
	"context"
	"crypto/cipher"
	"errors"
	"fmt"
	"io"
)

// RangeOpener opens n bytes of a sealed stream from offset off; n < 0
// reads to its end. A blob store's range reader is one.
type RangeOpener func(ctx context.Context, off, n int64) (io.ReadCloser, error)

// ReaderAtOpener is the RangeOpener of a sealed stream of length size held
// by ra (a file, a byte slice).
func ReaderAtOpener(ra io.ReaderAt, size int64) RangeOpener {
	return func(_ context.Context, off, n int64) (io.ReadCloser, error) {
		if n < 0 {
			n = size - off
		}
		return io.NopCloser(io.NewSectionReader(ra, off, n)), nil
	}
}

// ErrRange is returned for a range outside the stream.
var ErrRange = errors.New("range outside the stream")

// OpenRange returns the plaintext bytes [off, off+n) of a stream of size
// plaintext bytes (the size recorded when it was sealed), wrapped under
// wrap with ad. It reads the header and then only the segments that cover
// the range, and holds one segment at a time. The stream's end is checked
// whenever the range reaches its last segment: a stream cut short or
// extended fails there with ErrCorrupt, as does any segment that does not
// open. Bytes read before a failure are genuine; a caller must still treat
// the read as failed.
func OpenRange(ctx context.Context, open RangeOpener, wrap cipher.AEAD, ad []byte, size, off, n int64) (io.ReadCloser, error) {
	if size < 0 || off < 0 || n < 0 || off > size || n > size-off {
		return nil, fmt.Errorf("%w: bytes %d+%d of %d", ErrRange, off, n, size)
	}
	if Segments(size) > maxSegments {
		return nil, ErrTooLarge
	}
	hdrLen := HeaderSize(wrap)
	hr, err := open(ctx, 0, hdrLen)
	if err != nil {
		return nil, fmt.Errorf("sealstream: open header: %w", err)
	}
	hdr := make([]byte, hdrLen)
	_, err = io.ReadFull(hr, hdr)
	_ = hr.Close()
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: header cut short", ErrCorrupt)
	}
	if err != nil {
		return nil, fmt.Errorf("sealstream: read header: %w", err)
	}
	k, err := openHeader(hdr, wrap, ad)
	if err != nil {
		return nil, err
	}
	r := &reader{key: k, size: size, last: Segments(size) - 1}
	switch {
	case n == 0 && size > 0:
		r.src = io.NopCloser(eofReader{})
		r.done = true
		return r, nil
	case size == 0:
		// The one, empty segment is still opened: it proves the
		// stream was closed, not cut before its end.
		r.seg, r.end, r.tail = 0, 0, 0
	default:
		r.seg = off / SegmentSize
		r.skip = int(off % SegmentSize)
		r.end = (off + n - 1) / SegmentSize
		r.tail = int((off+n-1)%SegmentSize) + 1
	}
	length := (r.end - r.seg + 1) * (SegmentSize + tagSize)
	if r.end == r.last {
		length = -1 // to the end, so that bytes after the last segment are seen
	}
	src, err := open(ctx, hdrLen+r.seg*(SegmentSize+tagSize), length)
	if err != nil {
		return nil, fmt.Errorf("sealstream: open segments: %w", err)
	}
	r.src = src
	r.sealed = make([]byte, 0, SegmentSize+tagSize)
	return r, nil
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// reader opens segments seg..end, giving the bytes of each from skip (the
// first) to tail (the last).
type reader struct {
	key      *streamKey
	src      io.ReadCloser
	size     int64
	last     int64 // number of the stream's last segment
	seg, end int64
	skip     int // bytes of segment seg before the range
	tail     int // bytes of segment end up to the range's end
	sealed   []byte
	plain    []byte // what is left of the current segment to give
	done     bool
	err      error
}

func (r *reader) Read(p []byte) (int, error) {
	for len(r.plain) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.done {
			return 0, io.EOF
		}
		r.err = r.next()
	}
	n := copy(p, r.plain)
	r.plain = r.plain[n:]
	return n, nil
}

// next opens segment r.seg.
func (r *reader) next() error {
	isLast := r.seg == r.last
	plainLen := int64(SegmentSize)
	if isLast {
		plainLen = r.size - r.last*SegmentSize
	}
	buf := r.sealed[:plainLen+tagSize]
	if _, err := io.ReadFull(r.src, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: segment %d cut short", ErrCorrupt, r.seg)
		}
		return fmt.Errorf("sealstream: read segment %d: %w", r.seg, err)
	}
	plain, err := r.key.aead.Open(buf[:0], r.key.nonceFor(r.seg, isLast), buf, nil)
	if err != nil {
		return fmt.Errorf("%w: segment %d", ErrCorrupt, r.seg)
	}
	if isLast {
		var one [1]byte
		if m, _ := io.ReadFull(r.src, one[:]); m > 0 {
			return fmt.Errorf("%w: bytes after the last segment", ErrCorrupt)
		}
	}
	from, to := 0, len(plain)
	if r.seg == r.end {
		to = r.tail
	}
	if from < r.skip {
		from, r.skip = r.skip, 0
	}
	r.plain = plain[from:to]
	if r.seg == r.end {
		r.done = true
	}
	r.seg++
	return nil
}

func (r *reader) Close() error {
	clear(r.sealed[:cap(r.sealed)])
	return r.src.Close()
}
