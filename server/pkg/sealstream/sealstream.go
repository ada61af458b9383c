// Package sealstream seals a stream of bytes in fixed-size segments, so
// that an attachment is sealed while it streams in, never whole in memory,
// and a range of it opens by decrypting only the segments that cover it
// (docs/attachments.md, "Sealing").
//
// The construction follows Tink's AES-GCM-HKDF streaming AEAD and age's
// STREAM: every stream gets its own random 256-bit key and 7-byte nonce
// prefix, and segment i is sealed with AES-256-GCM under the nonce
//
//	prefix(7) ‖ i (uint32, big endian) ‖ last (1 byte: 1 on the last segment, else 0)
//
// so that a segment moved to another position, dropped, or a stream cut
// at a segment boundary fails to open. The stream key and prefix are
// sealed ("wrapped") under the caller's key with the caller's associated
// data, which binds the stream to what it belongs to (for attachments:
// thread, message, attachment and key number): a header or a segment
// spliced from another stream opens under no other binding. Destroying
// the wrapping key makes every copy of the stream unreadable at once.
//
// Layout:
//
//	"PDBS" ‖ version (1) ‖ wrapped length (uint16 BE) ‖ wrapped key and prefix
//	segment 0 ‖ segment 1 ‖ … ‖ segment n-1
//
// Every segment but the last holds SegmentSize bytes of plaintext (plus a
// 16-byte tag); the last holds 0 to SegmentSize bytes, and is empty only
// when the whole stream is.
package sealstream

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
)

// SegmentSize is the plaintext size of every segment but the last.
const SegmentSize = 64 << 10

const (
	magic      = "PDBS"
	version    = 1
	keySize    = 32
	prefixSize = 7
	tagSize    = 16
	// fixedHeader is the header before the wrapped key and prefix.
	fixedHeader = len(magic) + 1 + 2
	// maxSegments keeps the segment number in its 4 bytes.
	maxSegments = 1 << 32
)

// ErrCorrupt is returned when a stream does not open: a segment altered,
// moved, dropped or added, the stream cut short or extended, a header
// from another stream, or the wrong wrapping key or associated data.
var ErrCorrupt = errors.New("sealed stream does not open: altered, reordered, truncated, extended or not bound to this item")

// ErrTooLarge is returned when a stream would need more segments than
// its nonce can number (256 TiB).
var ErrTooLarge = errors.New("sealed stream too large")

// HeaderSize is the length of the header of a stream wrapped by wrap.
func HeaderSize(wrap cipher.AEAD) int64 {
	return int64(fixedHeader + wrappedSize(wrap))
}

func wrappedSize(wrap cipher.AEAD) int {
	return wrap.NonceSize() + keySize + prefixSize + wrap.Overhead()
}

// Segments is the number of segments of a stream of size plaintext bytes.
func Segments(size int64) int64 {
	if size <= 0 {
		return 1
	}
	return (size + SegmentSize - 1) / SegmentSize
}

// SealedSize is the length of the sealed form of size plaintext bytes.
func SealedSize(wrap cipher.AEAD, size int64) int64 {
	return HeaderSize(wrap) + size + Segments(size)*tagSize
}

// streamKey is one stream's segment cipher and nonce prefix.
type streamKey struct {
	aead   cipher.AEAD
	prefix [prefixSize]byte
	nonce  [12]byte
}

func newStreamKey(secret []byte) (*streamKey, error) {
	block, err := aes.NewCipher(secret[:keySize])
	if err != nil {
		return nil, fmt.Errorf("sealstream: %w", err)
	}
	a, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("sealstream: %w", err)
	}
	k := &streamKey{aead: a}
	copy(k.prefix[:], secret[keySize:])
	return k, nil
}

// nonceFor returns the nonce of segment i (valid until the next call).
func (k *streamKey) nonceFor(i int64, last bool) []byte {
	copy(k.nonce[:prefixSize], k.prefix[:])
	binary.BigEndian.PutUint32(k.nonce[prefixSize:11], uint32(i))
	k.nonce[11] = 0
	if last {
		k.nonce[11] = 1
	}
	return k.nonce[:]
}

// newHeader makes a fresh stream key and prefix and the header that
// carries them wrapped under wrap with ad.
func newHeader(wrap cipher.AEAD, ad []byte) ([]byte, *streamKey, error) {
	secret := make([]byte, keySize+prefixSize)
	defer clear(secret)
	if _, err := rand.Read(secret); err != nil {
		return nil, nil, fmt.Errorf("sealstream: random key: %w", err)
	}
	k, err := newStreamKey(secret)
	if err != nil {
		return nil, nil, err
	}
	hdr := make([]byte, fixedHeader, HeaderSize(wrap))
	copy(hdr, magic)
	hdr[len(magic)] = version
	binary.BigEndian.PutUint16(hdr[len(magic)+1:], uint16(wrappedSize(wrap)))
	if n := wrap.NonceSize(); n > 0 {
		nonce := hdr[fixedHeader : fixedHeader+n]
		if _, err := rand.Read(nonce); err != nil {
			return nil, nil, fmt.Errorf("sealstream: random nonce: %w", err)
		}
		hdr = hdr[:fixedHeader+n]
		hdr = wrap.Seal(hdr, nonce, secret, ad)
	} else {
		hdr = wrap.Seal(hdr, nil, secret, ad)
	}
	return hdr, k, nil
}

// openHeader checks a header and unwraps its stream key.
func openHeader(hdr []byte, wrap cipher.AEAD, ad []byte) (*streamKey, error) {
	if int64(len(hdr)) != HeaderSize(wrap) || string(hdr[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: bad header", ErrCorrupt)
	}
	if hdr[len(magic)] != version {
		return nil, fmt.Errorf("%w: header version %d, this build reads %d", ErrCorrupt, hdr[len(magic)], version)
	}
	if int(binary.BigEndian.Uint16(hdr[len(magic)+1:])) != wrappedSize(wrap) {
		return nil, fmt.Errorf("%w: wrapped key of another size", ErrCorrupt)
	}
	wrapped := hdr[fixedHeader:]
	n := wrap.NonceSize()
	secret, err := wrap.Open(nil, wrapped[:n], wrapped[n:], ad)
	if err != nil {
		return nil, fmt.Errorf("%w: the stream key does not unwrap", ErrCorrupt)
	}
	defer clear(secret)
	if len(secret) != keySize+prefixSize {
		return nil, fmt.Errorf("%w: stream key of %d bytes", ErrCorrupt, len(secret))
	}
	return newStreamKey(secret)
}
