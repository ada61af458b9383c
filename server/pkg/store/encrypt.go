package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Sealing a database written before sealing was on (spec §12, `progressdb
// keys encrypt-existing`, design §10): every plain thread record and
// message version is rewritten sealed, in place, thread by thread in ID
// order, in batches. Progress is the last thread done, kept in
// sys:encrypt:cursor (synced with every batch): a job killed part way
// resumes after it, and a record already sealed is skipped, so redoing a
// thread is harmless. The plaintext it replaced stays in the files until
// the erase step, which the store owes from the first sealed batch on
// (OweErase): the caller erases when the pass is done.

const encryptCursorKey = "sys:encrypt:cursor"

// ErrNotSealing: the store has no Sealer, so nothing can be sealed.
var ErrNotSealing = errors.New("the store does not seal (no key store)")

// SealPass is where a sealing pass of the whole database stands.
type SealPass struct {
	// After is the last thread whose records are all sealed; "" before
	// the first.
	After string
}

// SealCursor returns the pass a killed job left (its last thread done),
// and whether there is one.
func (s *Store) SealCursor(ctx context.Context) (SealPass, bool, error) {
	if err := ctx.Err(); err != nil {
		return SealPass{}, false, err
	}
	v, closer, err := s.db.Get([]byte(encryptCursorKey))
	if errors.Is(err, pebble.ErrNotFound) {
		return SealPass{}, false, nil
	}
	if err != nil {
		return SealPass{}, false, err
	}
	defer closer.Close()
	return SealPass{After: string(v)}, true, nil
}

// EndSealPass forgets the cursor once a pass has reached the last thread.
func (s *Store) EndSealPass(ctx context.Context) error {
	b := s.db.NewBatch()
	_ = b.Delete([]byte(encryptCursorKey), nil)
	return s.apply(ctx, write{kind: writeState, batch: b, sync: true})
}

// NextThread returns the first thread ID after after (every thread,
// deleted ones included), or "" when there is none.
func (s *Store) NextThread(ctx context.Context, after string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	lower := []byte(threadNS)
	if after != "" {
		lower = upperBound(threadPrefix(after)) // thread:<after>; skips every key of after
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: []byte("thread;")})
	if err != nil {
		return "", err
	}
	defer it.Close()
	for valid := it.First(); valid; {
		tid, _, ok := parseThreadKey(it.Key())
		if !ok {
			valid = it.Next()
			continue
		}
		if has, err := s.has(threadMetaKey(tid)); err != nil {
			return "", err
		} else if has {
			return tid, nil
		}
		// Keys of a thread without metadata (a purge cut short): not a
		// thread to seal.
		valid = it.SeekGE(upperBound(threadPrefix(tid)))
	}
	return "", it.Error()
}

// SealThread seals up to limit plain records of thread tid (its metadata,
// then its messages' versions in log order), under the thread's stripe so
// that no write of the thread interleaves, and commits them synced with
// the pass's cursor: after (the last thread done before tid) while plain
// records may be left, tid once none is. It returns how many it sealed
// and whether the thread is done; a caller calls it again until it is.
func (s *Store) SealThread(ctx context.Context, tid, after string, limit int) (sealed int, done bool, err error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	if s.sealer == nil {
		return 0, false, ErrNotSealing
	}
	if limit <= 0 {
		limit = 1
	}
	h := s.hold(tid)
	defer h.release()
	b := s.db.NewBatch()
	t, err := s.readThread(tid)
	if errors.Is(err, ErrNotFound) {
		_ = b.Close()
		return 0, true, nil
	}
	if err != nil {
		_ = b.Close()
		return 0, false, err
	}
	if t.Sealed == "" {
		if err := s.sealThread(ctx, &t); err != nil {
			_ = b.Close()
			return 0, false, err
		}
		putThreadRecord(b, t)
		// Idempotency answers written while the thread was plain are
		// plain copies of it: dropped, not sealed (a replay of one then
		// answers that its answer is gone).
		answers := append(threadPrefix(tid), idemThreadSuffix...)
		_ = b.DeleteRange(answers, upperBound(answers), nil)
		sealed++
	}
	prefix := logPrefix(tid)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upperBound(prefix)})
	if err != nil {
		_ = b.Close()
		return 0, false, err
	}
	defer it.Close()
	for valid := it.First(); valid && sealed < limit; valid = it.Next() {
		_, mid, ok := parseLogSuffix(it.Key()[len(prefix):])
		if !ok {
			continue
		}
		n, err := s.sealVersions(ctx, b, tid, mid, limit-sealed)
		if err != nil {
			_ = b.Close()
			return 0, false, err
		}
		sealed += n
	}
	if err := it.Error(); err != nil {
		_ = b.Close()
		return 0, false, err
	}
	done = sealed < limit
	cursor := after
	if done {
		cursor = tid
	}
	// Nothing replaced: losing the cursor only means reading the thread
	// again, so only a batch that replaced plaintext is synced.
	if sealed > 0 {
		// The plaintext lives on in the files: the erase step is owed
		// from the batch that replaces it on.
		_ = b.Delete([]byte(eraseKey), nil)
	}
	_ = b.Set([]byte(encryptCursorKey), []byte(cursor), nil)
	if err := s.apply(ctx, write{kind: writeState, batch: b, sync: sealed > 0}); err != nil {
		return 0, false, fmt.Errorf("seal thread %s: %w", tid, err)
	}
	return sealed, done, nil
}

// sealVersions adds to b the sealed form of up to limit plain versions of
// message mid; the caller holds the thread's stripe.
func (s *Store) sealVersions(ctx context.Context, b *pebble.Batch, tid, mid string, limit int) (int, error) {
	vp := versionPrefix(mid)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: vp, UpperBound: versionEnd(mid)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	n := 0
	for valid := it.First(); valid && n < limit; valid = it.Next() {
		_, version, ok := parseVersionKey(it.Key())
		if !ok {
			continue
		}
		m, err := decodeMessage(mid, version, it.Value())
		if err != nil {
			return n, fmt.Errorf("message %s version %d: %w", mid, version, err)
		}
		if m.Sealed != "" || m.Thread != tid {
			continue
		}
		m.Key = 0
		if err := s.sealMessage(ctx, &m); err != nil {
			return n, err
		}
		putVersion(b, m)
		if m.Version == 1 {
			_ = b.Set(keyIndexKey(tid, m.Key, mid), nil, nil)
		}
		n++
	}
	return n, it.Error()
}
