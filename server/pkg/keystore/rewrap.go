package keystore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"gocloud.dev/secrets"

	"github.com/progressdb/progressdb/server/pkg/erase"
)

// rewrapSync is how many values a rotation re-wraps between syncs.
const rewrapSync = 64

// RewrapOptions configure Rewrap.
type RewrapOptions struct {
	// Progress, when set, is told where the rotation is: once the values
	// to re-wrap are counted, after every rewrapSync of them, and at each
	// step of the erase that follows.
	Progress func(RewrapProgress)
}

// RewrapProgress is where a rotation is: values re-wrapped of those left
// when it (or its resumption) began, then the erase step.
type RewrapProgress struct {
	Done, Total int
	// Erase is set once the erase step has begun.
	Erase *erase.Progress
}

// RewrapResult describes a KEK rotation.
type RewrapResult struct {
	// Rewrapped is the number of values this call re-wrapped (a resumed
	// rotation counts only what was left).
	Rewrapped int
	Erase     EraseResult
}

// Rewrap rotates the KEK to `to`: every data key and secret is re-wrapped
// by it, the check value replaced, and the old wrapped values erased from
// the key store's files. A rotation that stops part way (a kill, an error)
// is resumed by opening with RotateTo set to the same keeper and calling
// Rewrap again: each value's generation byte says whether it is done.
// Keys may be created and destroyed meanwhile.
func (ks *KeyStore) Rewrap(ctx context.Context, to *secrets.Keeper, opts RewrapOptions) (RewrapResult, error) {
	var res RewrapResult
	if err := ks.live(ctx); err != nil {
		return res, err
	}
	if to == nil {
		return res, fmt.Errorf("rewrap: %w: no keeper", ErrInvalidKEK)
	}
	if ks.Replicated() {
		return res, fmt.Errorf("rewrap: %w", ErrReplicated)
	}
	old, next, rotation, err := ks.beginRotation(ctx, to)
	if err != nil {
		return res, fmt.Errorf("rewrap: %w", err)
	}
	total := 0 // values looked at, for the erase step's progress
	if rotation != nil {
		n, err := ks.rewrapAll(ctx, old, next, func(p RewrapProgress) {
			total = p.Total
			if opts.Progress != nil {
				opts.Progress(p)
			}
		})
		res.Rewrapped = n
		if err != nil {
			return res, fmt.Errorf("rewrap: %w", err)
		}
		if err := ks.endRotation(old, next, rotation); err != nil {
			return res, fmt.Errorf("rewrap: %w", err)
		}
	}
	var eo erase.Options
	if opts.Progress != nil {
		eo.Progress = func(ep erase.Progress) {
			opts.Progress(RewrapProgress{Done: total, Total: total, Erase: &ep})
		}
	}
	er, err := ks.Erase(ctx, eo)
	res.Erase = er
	if err != nil {
		return res, fmt.Errorf("rewrap: %w", err)
	}
	return res, nil
}

// beginRotation records the new KEK's check value (synced) unless a
// rotation to it is under way. A nil rotation value means `to` is already
// the KEK (a rotation that finished before its erase did): nothing to
// re-wrap.
func (ks *KeyStore) beginRotation(ctx context.Context, to *secrets.Keeper) (old, next byte, rotation []byte, err error) {
	ks.genMu.Lock()
	defer ks.genMu.Unlock()
	old, next = ks.gen, ks.gen+1
	if ks.rotating {
		rot, _, err := ks.get([]byte(rotateKey))
		if err != nil {
			return 0, 0, nil, err
		}
		if !opensCheck(ctx, to, rot) {
			return 0, 0, nil, fmt.Errorf("%w: the new KEK is not the one the rotation began with", ErrWrongKEK)
		}
		ks.keepers[next] = to
		return old, next, rot, nil
	}
	check, _, err := ks.get([]byte(kekKey))
	if err != nil {
		return 0, 0, nil, err
	}
	if opensCheck(ctx, to, check) {
		return old, old, nil, nil
	}
	w, err := to.Encrypt(ctx, []byte(checkPlain))
	if err != nil {
		return 0, 0, nil, err
	}
	rot := append([]byte{next}, w...)
	if err := ks.db.Set([]byte(rotateKey), rot, pebble.Sync); err != nil {
		return 0, 0, nil, err
	}
	ks.keepers[next] = to
	ks.rotating = true
	return old, next, rot, nil
}

// rewrapAll re-wraps every value of generation old with the keeper of
// next. A data key is re-read and re-written under its thread's stripe, so
// that a destroy in between is never undone by writing the key back.
func (ks *KeyStore) rewrapAll(ctx context.Context, old, next byte, progress func(RewrapProgress)) (int, error) {
	var keys [][]byte
	for _, k := range []string{indexSecretKey, receiptSecretKey} {
		keys = append(keys, []byte(k))
	}
	it, err := ks.db.NewIter(&pebble.IterOptions{LowerBound: []byte(threadNS), UpperBound: []byte("k;")})
	if err != nil {
		return 0, err
	}
	for valid := it.First(); valid; valid = it.Next() {
		if tid, ok := dataKeyThread(it.Key()); ok && tid != "" && len(it.Value()) > 32 && it.Value()[32] == old {
			keys = append(keys, bytes.Clone(it.Key()))
		}
	}
	if err := it.Close(); err != nil {
		return 0, err
	}
	report := func(done int) {
		if progress != nil {
			progress(RewrapProgress{Done: done, Total: len(keys)})
		}
	}
	// Progress counts the values looked at: one already of the new
	// generation (the secrets of a resumed rotation) is done as well.
	done, pending := 0, 0
	report(0)
	for i, key := range keys {
		if err := ks.live(ctx); err != nil {
			return done, err
		}
		ok, err := ks.rewrapOne(ctx, key, old, next)
		if err != nil {
			return done, fmt.Errorf("%s: %w", key, err)
		}
		if !ok {
			continue
		}
		done++
		pending++
		if pending == rewrapSync {
			if err := ks.db.LogData(nil, pebble.Sync); err != nil {
				return done, err
			}
			pending = 0
			report(i + 1)
			if ks.afterRewrapBatch != nil {
				ks.afterRewrapBatch()
			}
		}
	}
	if err := ks.db.LogData(nil, pebble.Sync); err != nil {
		return done, err
	}
	report(len(keys))
	return done, nil
}

// rewrapOne re-wraps the value at key if it is still of generation old.
func (ks *KeyStore) rewrapOne(ctx context.Context, key []byte, old, next byte) (bool, error) {
	prefixLen := 0
	if tid, ok := dataKeyThread(key); ok {
		mu := ks.stripe(tid)
		mu.Lock()
		defer mu.Unlock()
		prefixLen = 32 // the author's HMAC comes first
	}
	v, ok, err := ks.get(key)
	if err != nil || !ok || len(v) <= prefixLen || v[prefixLen] != old {
		return false, err
	}
	plain, err := ks.unwrap(ctx, v[prefixLen:])
	if err != nil {
		return false, err
	}
	defer clear(plain)
	w, err := ks.wrap(ctx, next, plain)
	if err != nil {
		return false, err
	}
	if err := ks.db.Set(key, append(v[:prefixLen:prefixLen], w...), pebble.NoSync); err != nil {
		return false, err
	}
	return true, nil
}

// endRotation makes the new KEK the store's (synced) and owes a full erase:
// every old wrapped value is still in the files.
func (ks *KeyStore) endRotation(old, next byte, rotation []byte) error {
	ks.genMu.Lock()
	defer ks.genMu.Unlock()
	ks.mu.Lock()
	defer ks.mu.Unlock()
	b := ks.db.NewBatch()
	defer b.Close()
	_ = b.Set([]byte(kekKey), rotation, nil)
	_ = b.Delete([]byte(rotateKey), nil)
	_ = b.Delete([]byte(erasedKey), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	delete(ks.keepers, old)
	ks.gen, ks.rotating = next, false
	ks.owedFull = true
	ks.destroys++
	return nil
}

// dataKeyThread returns the thread of a data key's entry k:<tid>:k:<num>.
func dataKeyThread(key []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(key, []byte(threadNS))
	if !ok {
		return "", false
	}
	i := bytes.IndexByte(rest, ':')
	if i <= 0 {
		return "", false
	}
	if _, ok := bytes.CutPrefix(rest[i+1:], []byte("k:")); !ok {
		return "", false
	}
	return string(rest[:i]), true
}
