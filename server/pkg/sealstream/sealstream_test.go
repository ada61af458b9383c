package sealstream_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"runtime"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/sealstream"
)

const S = sealstream.SegmentSize

func newWrap(t testing.TB, randomNonce bool) cipher.AEAD {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	var a cipher.AEAD
	if randomNonce {
		a, err = cipher.NewGCMWithRandomNonce(block)
	} else {
		a, err = cipher.NewGCM(block)
	}
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func seal(t testing.TB, wrap cipher.AEAD, ad, plain []byte, chunk int) []byte {
	t.Helper()
	var out bytes.Buffer
	w, err := sealstream.NewWriter(&out, wrap, ad)
	if err != nil {
		t.Fatal(err)
	}
	for p := plain; len(p) > 0; {
		n := min(chunk, len(p))
		if _, err := w.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func openRange(sealed []byte, wrap cipher.AEAD, ad []byte, size, off, n int64) ([]byte, error) {
	r, err := sealstream.OpenRange(context.Background(), sealstream.ReaderAtOpener(bytes.NewReader(sealed), int64(len(sealed))), wrap, ad, size, off, n)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

var sizes = []int{0, 1, S - 1, S, S + 1, 2 * S, 2*S + 1, 3*S + 17}

func TestRoundTripAtBoundaries(t *testing.T) {
	ad := []byte("thread\x00message\x00attachment")
	for _, randomNonce := range []bool{true, false} {
		wrap := newWrap(t, randomNonce)
		for _, size := range sizes {
			plain := make([]byte, size)
			_, _ = rand.Read(plain)
			for _, chunk := range []int{1 << 20, 1000, S} {
				sealed := seal(t, wrap, ad, plain, chunk)
				if got, want := int64(len(sealed)), sealstream.SealedSize(wrap, int64(size)); got != want {
					t.Fatalf("size %d: sealed %d bytes, SealedSize says %d", size, got, want)
				}
				if bytes.Contains(sealed, plain[:min(size, 64)]) && size >= 16 {
					t.Fatalf("size %d: plaintext in the sealed stream", size)
				}
				got, err := openRange(sealed, wrap, ad, int64(size), 0, int64(size))
				if err != nil || !bytes.Equal(got, plain) {
					t.Fatalf("size %d chunk %d: full read: %d bytes, %v", size, chunk, len(got), err)
				}
			}
		}
	}
}

func TestRanges(t *testing.T) {
	wrap := newWrap(t, true)
	ad := []byte("ad")
	size := 3*S + 17
	plain := make([]byte, size)
	_, _ = rand.Read(plain)
	sealed := seal(t, wrap, ad, plain, 4096)
	type rg struct{ off, n int }
	ranges := []rg{{0, 0}, {0, 1}, {S - 1, 2}, {S, S}, {S - 1, S + 2}, {size - 1, 1}, {size, 0}, {2*S + 5, S + 12}, {1, size - 1}}
	rnd := mrand.New(mrand.NewPCG(1, 2))
	for range 50 {
		off := rnd.IntN(size + 1)
		ranges = append(ranges, rg{off, rnd.IntN(size - off + 1)})
	}
	for _, g := range ranges {
		got, err := openRange(sealed, wrap, ad, int64(size), int64(g.off), int64(g.n))
		if err != nil || !bytes.Equal(got, plain[g.off:g.off+g.n]) {
			t.Fatalf("range %d+%d: %d bytes, %v", g.off, g.n, len(got), err)
		}
	}
	for _, g := range []rg{{-1, 1}, {0, size + 1}, {size, 1}} {
		if _, err := openRange(sealed, wrap, ad, int64(size), int64(g.off), int64(g.n)); !errors.Is(err, sealstream.ErrRange) {
			t.Fatalf("range %d+%d: %v, want ErrRange", g.off, g.n, err)
		}
	}
}

// TestTamper: every change of a stream, its binding or its declared size
// fails to open with ErrCorrupt when the read covers it.
func TestTamper(t *testing.T) {
	wrap := newWrap(t, true)
	ad := []byte("t1\x00m1\x00a1")
	size := 3*S + 17
	plain := make([]byte, size)
	_, _ = rand.Read(plain)
	sealed := seal(t, wrap, ad, plain, 1<<20)
	other := seal(t, wrap, []byte("t1\x00m1\x00a2"), plain, 1<<20)
	hdr := int(sealstream.HeaderSize(wrap))
	seg := func(b []byte, i int) []byte {
		from := hdr + i*(S+16)
		return b[from:min(from+S+16, len(b))]
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	flip := func(at int) []byte {
		b := bytes.Clone(sealed)
		b[at] ^= 1
		return b
	}
	cases := []struct {
		name   string
		stream []byte
		wrap   cipher.AEAD
		ad     []byte
		size   int
	}{
		{"magic", flip(0), wrap, ad, size},
		{"version", flip(4), wrap, ad, size},
		{"wrapped length", flip(6), wrap, ad, size},
		{"wrapped key", flip(hdr - 1), wrap, ad, size},
		{"segment 0", flip(hdr + 10), wrap, ad, size},
		{"segment 2 tag", flip(hdr + 3*(S+16) - 1), wrap, ad, size},
		{"last segment", flip(len(sealed) - 1), wrap, ad, size},
		{"segments swapped", cat(sealed[:hdr], seg(sealed, 1), seg(sealed, 0), seg(sealed, 2), seg(sealed, 3)), wrap, ad, size},
		{"last segment dropped", sealed[:hdr+3*(S+16)], wrap, ad, size},
		{"last segment dropped, size says so", sealed[:hdr+3*(S+16)], wrap, ad, 3 * S},
		{"cut mid-segment", sealed[:len(sealed)-5], wrap, ad, size},
		{"extended by bytes", cat(sealed, []byte{0}), wrap, ad, size},
		{"extended by a segment", cat(sealed, seg(sealed, 3)), wrap, ad, size},
		{"header of another stream", cat(other[:hdr], sealed[hdr:]), wrap, ad, size},
		{"segment of another stream", cat(sealed[:hdr], seg(other, 0), sealed[hdr+S+16:]), wrap, ad, size},
		{"other associated data", sealed, wrap, []byte("t1\x00m1\x00a2"), size},
		{"other wrapping key", sealed, newWrap(t, true), ad, size},
		{"declared size longer", sealed, wrap, ad, size + 1},
		{"declared size shorter", sealed, wrap, ad, size - 1},
		{"declared size a segment shorter", sealed, wrap, ad, 2*S + 17},
		{"header only", sealed[:hdr], wrap, ad, size},
		{"empty", nil, wrap, ad, size},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := openRange(c.stream, c.wrap, c.ad, int64(c.size), 0, int64(c.size))
			if !errors.Is(err, sealstream.ErrCorrupt) {
				t.Fatalf("read %d bytes, err %v; want ErrCorrupt", len(got), err)
			}
		})
	}
	// An empty stream with its one segment removed does not open either.
	empty := seal(t, wrap, ad, nil, 1)
	if _, err := openRange(empty[:hdr], wrap, ad, 0, 0, 0); !errors.Is(err, sealstream.ErrCorrupt) {
		t.Fatalf("empty stream without its segment: %v", err)
	}
	// A range read checks only what it covers, but a range touching the
	// last segment still checks the end.
	ext := cat(sealed, []byte{0})
	if _, err := openRange(ext, wrap, ad, int64(size), int64(size-1), 1); !errors.Is(err, sealstream.ErrCorrupt) {
		t.Fatalf("range at the end of an extended stream: %v", err)
	}
	if got, err := openRange(flip(len(sealed)-1), wrap, ad, int64(size), 0, S); err != nil || !bytes.Equal(got, plain[:S]) {
		t.Fatalf("range before a damaged last segment: %v", err)
	}
}

// TestMemoryBoundedBySegment: sealing and opening 16 MiB allocate a few
// segments' worth, not the stream's size.
func TestMemoryBoundedBySegment(t *testing.T) {
	const size = 16 << 20
	wrap := newWrap(t, true)
	ad := []byte("ad")
	src := &patternReader{left: size}
	var sealedLen countWriter
	alloc := allocated(func() {
		w, err := sealstream.NewWriter(&sealedLen, wrap, ad)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyBuffer(w, src, make([]byte, 32<<10)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	})
	if limit := uint64(4 * S); alloc > limit {
		t.Fatalf("sealing %d bytes allocated %d bytes, more than %d", size, alloc, limit)
	}
	sealed := seal(t, wrap, ad, bytes.Repeat([]byte("x"), size), 1<<20)
	alloc = allocated(func() {
		r, err := sealstream.OpenRange(context.Background(), sealstream.ReaderAtOpener(bytes.NewReader(sealed), int64(len(sealed))), wrap, ad, size, 0, size)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.CopyBuffer(io.Discard, r, make([]byte, 32<<10))
		if err != nil || n != size {
			t.Fatalf("read %d: %v", n, err)
		}
		_ = r.Close()
	})
	if limit := uint64(4 * S); alloc > limit {
		t.Fatalf("opening %d bytes allocated %d bytes, more than %d", size, alloc, limit)
	}
}

func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

type patternReader struct{ left int }

func (p *patternReader) Read(b []byte) (int, error) {
	if p.left == 0 {
		return 0, io.EOF
	}
	n := min(len(b), p.left)
	for i := range b[:n] {
		b[i] = byte(i)
	}
	p.left -= n
	return n, nil
}

type countWriter int64

func (c *countWriter) Write(b []byte) (int, error) { *c += countWriter(len(b)); return len(b), nil }

func Example() {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	block, _ := aes.NewCipher(key)
	wrap, _ := cipher.NewGCMWithRandomNonce(block)
	ad := []byte("what the stream belongs to")

	var sealed bytes.Buffer
	w, _ := sealstream.NewWriter(&sealed, wrap, ad)
	_, _ = w.Write([]byte("hello, attachment"))
	_ = w.Close()

	r, err := sealstream.OpenRange(context.Background(), sealstream.ReaderAtOpener(bytes.NewReader(sealed.Bytes()), int64(sealed.Len())), wrap, ad, 17, 7, 10)
	if err != nil {
		panic(err)
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	fmt.Println(string(b))
	// Output: attachment
}
