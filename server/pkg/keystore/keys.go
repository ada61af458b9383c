package keystore

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/erase"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// KeyRef names one data key: its thread and its number in the thread.
type KeyRef struct {
	Thread string
	Number uint32
}

// numWidth is the width of key numbers in keys (%010d): any uint32.
const numWidth = 10

func threadPrefix(tid string) []byte { return []byte(threadNS + tid + ":") }
func threadEnd(tid string) []byte    { return []byte(threadNS + tid + ";") }
func nextKey(tid string) []byte      { return append(threadPrefix(tid), "next"...) }

func authorEntry(tid string, mac [32]byte) []byte {
	return hex.AppendEncode(append(threadPrefix(tid), "a:"...), mac[:])
}

func keyEntry(tid string, num uint32) []byte {
	return appendNum(append(threadPrefix(tid), "k:"...), num)
}

func authorPrefix(mac [32]byte) []byte {
	return append(hex.AppendEncode([]byte(authorNS), mac[:]), ':')
}

func authorIndex(mac [32]byte, tid string, num uint32) []byte {
	b := append(authorPrefix(mac), tid...)
	return appendNum(append(b, ':'), num)
}

// prefixRange bounds an iterator to the keys under prefix, which ends in
// ':' (the byte before ';').
func prefixRange(prefix []byte) *pebble.IterOptions {
	end := bytes.Clone(prefix)
	end[len(end)-1] = ';'
	return &pebble.IterOptions{LowerBound: prefix, UpperBound: end}
}

func appendNum(b []byte, num uint32) []byte {
	s := strconv.FormatUint(uint64(num), 10)
	for range numWidth - len(s) {
		b = append(b, '0')
	}
	return append(b, s...)
}

func parseNum(b []byte) (uint32, bool) {
	n, err := strconv.ParseUint(string(b), 10, 32)
	return uint32(n), err == nil
}

// pointSpan is the erase span of one key.
func pointSpan(key []byte) erase.Span {
	return erase.Span{Start: key, End: append(bytes.Clone(key), 0)}
}

func checkThread(tid string) error {
	if err := store.ValidateID(tid); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidThread, err)
	}
	return nil
}

// newAEAD builds AES-256-GCM with random nonces prepended to the sealed
// value.
func newAEAD(dek []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(dek)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCMWithRandomNonce(block)
}

// Key returns the author's key in the thread and its number, creating it
// on the author's first write there. A key it creates is synced before
// Key returns: a value sealed with a key a crash lost would be unreadable.
func (ks *KeyStore) Key(ctx context.Context, tid, author string) (uint32, cipher.AEAD, error) {
	if err := ks.live(ctx); err != nil {
		return 0, nil, err
	}
	if err := checkThread(tid); err != nil {
		return 0, nil, err
	}
	mac := ks.mac(author)
	if num, a, ok := ks.cache.byAuthor(tid, mac); ok {
		return num, a, nil
	}
	if p := ks.repl.Load(); p != nil {
		num, a, err := ks.createReplicated(ctx, p, tid, mac)
		if err != nil {
			return 0, nil, fmt.Errorf("key in thread %s: %w", tid, err)
		}
		return num, a, nil
	}
	mu := ks.stripe(tid)
	mu.Lock()
	defer mu.Unlock()
	if num, a, ok := ks.cache.byAuthor(tid, mac); ok {
		return num, a, nil
	}
	v, ok, err := ks.get(authorEntry(tid, mac))
	if err != nil {
		return 0, nil, fmt.Errorf("key of thread %s: %w", tid, err)
	}
	if ok {
		num, valid := parseNum(v)
		if !valid {
			return 0, nil, fmt.Errorf("key of thread %s: malformed author entry", tid)
		}
		a, err := ks.fill(ctx, tid, num)
		if err != nil {
			return 0, nil, err
		}
		return num, a, nil
	}
	num, a, err := ks.create(ctx, tid, mac)
	if err != nil {
		return 0, nil, fmt.Errorf("create key in thread %s: %w", tid, err)
	}
	return num, a, nil
}

// create makes a new key for (tid, mac); the caller holds tid's stripe.
func (ks *KeyStore) create(ctx context.Context, tid string, mac [32]byte) (uint32, cipher.AEAD, error) {
	num, err := ks.next(tid)
	if err != nil {
		return 0, nil, err
	}
	dek := make([]byte, 32)
	defer clear(dek)
	if _, err := rand.Read(dek); err != nil {
		return 0, nil, err
	}
	a, err := newAEAD(dek)
	if err != nil {
		return 0, nil, err
	}
	wrapped, err := ks.wrap(ctx, ks.wrapGen(), dek)
	if err != nil {
		return 0, nil, err
	}
	b := ks.db.NewBatch()
	defer b.Close()
	ks.putKey(b, tid, mac, num, wrapped)
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, nil, err
	}
	ks.cache.put(tid, num, &mac, a)
	return num, a, nil
}

// next is the number the thread's next key gets.
func (ks *KeyStore) next(tid string) (uint32, error) {
	v, ok, err := ks.get(nextKey(tid))
	if err != nil || !ok {
		return 1, err
	}
	n, valid := parseNum(v)
	if !valid || n == 0 {
		return 0, fmt.Errorf("malformed key counter %q", v)
	}
	return n, nil
}

// putKey adds to b key num of (tid, mac), its author entries and the
// thread's counter past it.
func (ks *KeyStore) putKey(b *pebble.Batch, tid string, mac [32]byte, num uint32, wrapped []byte) {
	_ = b.Set(keyEntry(tid, num), append(mac[:len(mac):len(mac)], wrapped...), nil)
	_ = b.Set(authorEntry(tid, mac), appendNum(nil, num), nil)
	_ = b.Set(authorIndex(mac, tid, num), nil, nil)
	_ = b.Set(nextKey(tid), appendNum(nil, num+1), nil)
}

// KeyByNumber returns the AEAD of a thread's key number: what opens a
// value sealed with it. ErrNoKey when the key is destroyed.
func (ks *KeyStore) KeyByNumber(ctx context.Context, tid string, num uint32) (cipher.AEAD, error) {
	if err := ks.live(ctx); err != nil {
		return nil, err
	}
	if err := checkThread(tid); err != nil {
		return nil, err
	}
	if a, ok := ks.cache.byNumber(tid, num); ok {
		return a, nil
	}
	mu := ks.stripe(tid)
	mu.Lock()
	defer mu.Unlock()
	if a, ok := ks.cache.byNumber(tid, num); ok {
		return a, nil
	}
	return ks.fill(ctx, tid, num)
}

// fill reads, unwraps and caches a key; the caller holds tid's stripe.
func (ks *KeyStore) fill(ctx context.Context, tid string, num uint32) (cipher.AEAD, error) {
	v, ok, err := ks.get(keyEntry(tid, num))
	if err != nil {
		return nil, fmt.Errorf("key %d of thread %s: %w", num, tid, err)
	}
	if !ok {
		return nil, fmt.Errorf("key %d of thread %s: %w", num, tid, ErrNoKey)
	}
	if len(v) < 32+2 {
		return nil, fmt.Errorf("key %d of thread %s: malformed entry", num, tid)
	}
	var mac [32]byte
	copy(mac[:], v)
	dek, err := ks.unwrap(ctx, v[32:])
	if err != nil {
		return nil, fmt.Errorf("key %d of thread %s: %w", num, tid, err)
	}
	defer clear(dek)
	a, err := newAEAD(dek)
	if err != nil {
		return nil, fmt.Errorf("key %d of thread %s: %w", num, tid, err)
	}
	ks.cache.put(tid, num, &mac, a)
	return a, nil
}

// AuthorKeys lists every key of the author, through the author index: its
// cost follows the author's threads, not the size of the store.
func (ks *KeyStore) AuthorKeys(ctx context.Context, author string) ([]KeyRef, error) {
	if err := ks.live(ctx); err != nil {
		return nil, err
	}
	prefix := authorPrefix(ks.mac(author))
	it, err := ks.db.NewIter(prefixRange(prefix))
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var refs []KeyRef
	for valid := it.First(); valid; valid = it.Next() {
		rest := it.Key()[len(prefix):]
		i := bytes.LastIndexByte(rest, ':')
		if i <= 0 {
			continue
		}
		num, ok := parseNum(rest[i+1:])
		if !ok {
			continue
		}
		refs = append(refs, KeyRef{Thread: string(rest[:i]), Number: num})
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("author keys: %w", err)
	}
	return refs, nil
}

// DestroyThread deletes every key of the thread (synced), its key counter
// and its entries in the author index, and returns how many keys it
// destroyed; 0 for a thread with none left (a repeated destroy). Every
// value they sealed is unreadable once it returns. The key store owes an
// erase from then on (Erase).
func (ks *KeyStore) DestroyThread(ctx context.Context, tid string) (int, error) {
	if err := ks.live(ctx); err != nil {
		return 0, err
	}
	if err := checkThread(tid); err != nil {
		return 0, err
	}
	if p := ks.repl.Load(); p != nil {
		return ks.destroyThreadReplicated(ctx, p, tid)
	}
	return ks.destroyThread(tid)
}

// destroyThread is DestroyThread on this store, synced.
func (ks *KeyStore) destroyThread(tid string) (int, error) {
	mu := ks.stripe(tid)
	mu.Lock()
	defer mu.Unlock()

	prefix := threadPrefix(tid)
	keyPrefix := append(bytes.Clone(prefix), "k:"...)
	it, err := ks.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: threadEnd(tid)})
	if err != nil {
		return 0, err
	}
	b := ks.db.NewBatch()
	defer b.Close()
	spans := []erase.Span{{Start: prefix, End: threadEnd(tid)}}
	keys := 0
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		if rest, ok := bytes.CutPrefix(key, keyPrefix); ok && len(it.Value()) >= 32 {
			if num, ok := parseNum(rest); ok {
				var mac [32]byte
				copy(mac[:], it.Value())
				idx := authorIndex(mac, tid, num)
				_ = b.Delete(idx, nil)
				spans = append(spans, pointSpan(idx))
				keys++
			}
		}
		_ = b.Delete(key, nil)
	}
	if err := it.Close(); err != nil {
		return 0, fmt.Errorf("destroy keys of thread %s: %w", tid, err)
	}
	if b.Empty() {
		return 0, nil
	}
	if err := ks.commitDestroy(b, spans, pebble.Sync); err != nil {
		return 0, fmt.Errorf("destroy keys of thread %s: %w", tid, err)
	}
	ks.cache.dropThread(tid)
	return keys, nil
}

// DestroyAuthor deletes the author's key in every thread of the author
// index that keep does not keep (a thread under legal hold), synced before
// it returns, and lists what it destroyed and what it kept. Keys of other
// authors and the threads' key counters stay: a later write of the author
// in a thread gets a new number, never an old one.
func (ks *KeyStore) DestroyAuthor(ctx context.Context, author string, keep func(tid string) (bool, error)) (destroyed, kept []KeyRef, err error) {
	refs, err := ks.AuthorKeys(ctx, author)
	if err != nil {
		return nil, nil, err
	}
	mac := ks.mac(author)
	p := ks.repl.Load()
	var doomed []KeyRef
	for _, ref := range refs {
		if err := ks.live(ctx); err != nil {
			return destroyed, kept, err
		}
		if keep != nil {
			k, err := keep(ref.Thread)
			if err != nil {
				return destroyed, kept, fmt.Errorf("destroy keys of an author: %w", err)
			}
			if k {
				kept = append(kept, ref)
				continue
			}
		}
		if p != nil {
			doomed = append(doomed, ref)
			continue
		}
		gone, err := ks.destroyKey(ref, mac)
		if err != nil {
			return destroyed, kept, fmt.Errorf("destroy keys of an author: %w", err)
		}
		if gone {
			destroyed = append(destroyed, ref)
		}
	}
	if p != nil {
		// One op for the author's threads, as one sync below.
		destroyed, err = ks.destroyKeysReplicated(ctx, p, doomed)
		if err != nil {
			return nil, kept, fmt.Errorf("destroy keys of an author: %w", err)
		}
		return destroyed, kept, nil
	}
	if len(destroyed) > 0 {
		// One sync for the author's threads: a crash before it loses
		// deletes the caller was never told of, and it destroys again.
		if err := ks.db.LogData(nil, pebble.Sync); err != nil {
			return destroyed, kept, fmt.Errorf("destroy keys of an author: sync: %w", err)
		}
	}
	return destroyed, kept, nil
}

// destroyKey deletes one key of an author, applied (not yet synced).
func (ks *KeyStore) destroyKey(ref KeyRef, mac [32]byte) (bool, error) {
	mu := ks.stripe(ref.Thread)
	mu.Lock()
	defer mu.Unlock()
	ke := keyEntry(ref.Thread, ref.Number)
	_, ok, err := ks.get(ke)
	if err != nil {
		return false, err
	}
	ae, idx := authorEntry(ref.Thread, mac), authorIndex(mac, ref.Thread, ref.Number)
	b := ks.db.NewBatch()
	defer b.Close()
	_ = b.Delete(ke, nil)
	_ = b.Delete(ae, nil)
	_ = b.Delete(idx, nil)
	if err := ks.commitDestroy(b, []erase.Span{pointSpan(ke), pointSpan(ae), pointSpan(idx)}, pebble.NoSync); err != nil {
		return false, err
	}
	ks.cache.dropKey(ref.Thread, ref.Number, mac)
	return ok, nil
}

// commitDestroy commits a destroy's deletes together with the removal of
// the erased marker, and remembers the spans the next erase must cover.
func (ks *KeyStore) commitDestroy(b *pebble.Batch, spans []erase.Span, opt *pebble.WriteOptions) error {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	_ = b.Delete([]byte(erasedKey), nil)
	if err := b.Commit(opt); err != nil {
		return err
	}
	ks.spans = append(ks.spans, spans...)
	ks.destroys++
	return nil
}
