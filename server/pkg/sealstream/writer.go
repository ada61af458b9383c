package sealstream

import (
	"crypto/cipher"
	"errors"
	"fmt"
	"io"
)

// Writer seals what is written to it into dst. It holds at most one
// segment of plaintext and one of ciphertext, whatever the stream's size.
// Close seals the last segment; a Writer never closed leaves a stream
// that does not open (its last segment is missing).
type Writer struct {
	dst    io.Writer
	key    *streamKey
	plain  []byte // the segment being filled
	sealed []byte // the sealed segment being written
	n      int64  // segments written
	err    error
}

var errClosed = errors.New("sealstream: write after Close")

// NewWriter writes the header of a new stream to dst, its key wrapped
// under wrap with ad, and returns the Writer of its segments. wrap may
// carry its own nonce (NonceSize 0, as crypto/cipher's
// NewGCMWithRandomNonce) or take one, made at random.
func NewWriter(dst io.Writer, wrap cipher.AEAD, ad []byte) (*Writer, error) {
	hdr, k, err := newHeader(wrap, ad)
	if err != nil {
		return nil, err
	}
	if _, err := dst.Write(hdr); err != nil {
		return nil, fmt.Errorf("sealstream: write header: %w", err)
	}
	return &Writer{
		dst:    dst,
		key:    k,
		plain:  make([]byte, 0, SegmentSize),
		sealed: make([]byte, 0, SegmentSize+tagSize),
	}, nil
}

// Write buffers p, sealing every segment that is full and known not to be
// the last (more bytes follow it).
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	written := 0
	for len(p) > 0 {
		if len(w.plain) == SegmentSize {
			// More bytes follow: the full segment is not the last.
			if err := w.flush(false); err != nil {
				return written, err
			}
		}
		n := copy(w.plain[len(w.plain):SegmentSize], p)
		w.plain = w.plain[:len(w.plain)+n]
		p = p[n:]
		written += n
	}
	return written, nil
}

// Close seals the last segment (empty when nothing was written). It does
// not close dst.
func (w *Writer) Close() error {
	if w.err != nil {
		if w.err == errClosed {
			return nil
		}
		return w.err
	}
	if err := w.flush(true); err != nil {
		return err
	}
	clear(w.plain[:cap(w.plain)])
	w.err = errClosed
	return nil
}

func (w *Writer) flush(last bool) error {
	if w.n >= maxSegments {
		w.err = ErrTooLarge
		return w.err
	}
	w.sealed = w.key.aead.Seal(w.sealed[:0], w.key.nonceFor(w.n, last), w.plain, nil)
	w.n++
	w.plain = w.plain[:0]
	if _, err := w.dst.Write(w.sealed); err != nil {
		w.err = fmt.Errorf("sealstream: write segment: %w", err)
		return w.err
	}
	return nil
}
