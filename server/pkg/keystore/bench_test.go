package keystore_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// The cost a sealed write adds, through the cache: finding the author's
// key (an HMAC and a map read) and sealing a 1 KiB value.
func BenchmarkSealCached(b *testing.B) {
	ctx := context.Background()
	ks := open(b, filepath.Join(b.TempDir(), "keys"), keeper(b, 1))
	body := bytes.Repeat([]byte("x"), 1024)
	ad := []byte("pdb-seal-1\x00version\x00t1\x00m1\x0000000000000000000001\x000000000001")
	if _, _, err := ks.Key(ctx, "t1", "alice"); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		out := make([]byte, 0, len(body)+64)
		for pb.Next() {
			_, a, err := ks.Key(ctx, "t1", "alice")
			if err != nil {
				b.Error(err)
				return
			}
			out = a.Seal(out[:0], nil, body, ad)
		}
	})
}

// The cost a sealed read adds: the key by number from the cache and the
// opening of a 1 KiB value.
func BenchmarkOpenCached(b *testing.B) {
	ctx := context.Background()
	ks := open(b, filepath.Join(b.TempDir(), "keys"), keeper(b, 1))
	body := bytes.Repeat([]byte("x"), 1024)
	ad := []byte("pdb-seal-1\x00version\x00t1\x00m1\x0000000000000000000001\x000000000001")
	num, a, err := ks.Key(ctx, "t1", "alice")
	if err != nil {
		b.Fatal(err)
	}
	sealed := a.Seal(nil, nil, body, ad)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		out := make([]byte, 0, len(body))
		for pb.Next() {
			a, err := ks.KeyByNumber(ctx, "t1", num)
			if err != nil {
				b.Error(err)
				return
			}
			if out, err = a.Open(out[:0], nil, sealed, ad); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// A cache miss: the key read from the store and unwrapped by the local
// KEK (a KMS keeper makes this a network call).
func BenchmarkKeyMiss(b *testing.B) {
	ctx := context.Background()
	dir := filepath.Join(b.TempDir(), "keys")
	ks := open(b, dir, keeper(b, 1))
	const threads = 512
	for i := range threads {
		if _, _, err := ks.Key(ctx, fmt.Sprintf("t%d", i), "alice"); err != nil {
			b.Fatal(err)
		}
	}
	_ = ks.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		b.StopTimer()
		ks := open(b, dir, keeper(b, 1)) // an empty cache
		b.StartTimer()
		for j := 0; j < threads && i < b.N; j, i = j+1, i+1 {
			if _, err := ks.KeyByNumber(ctx, fmt.Sprintf("t%d", j), 1); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		_ = ks.Close()
		b.StartTimer()
	}
}

// A key's creation: a DEK made, wrapped and synced (once per author per
// thread).
func BenchmarkKeyCreate(b *testing.B) {
	ctx := context.Background()
	ks := open(b, filepath.Join(b.TempDir(), "keys"), keeper(b, 1))
	b.ReportAllocs()
	for i := range b.N {
		if _, _, err := ks.Key(ctx, fmt.Sprintf("t%d", i), "alice"); err != nil {
			b.Fatal(err)
		}
	}
}
