package keystore

import (
	"context"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/erase"
	"github.com/progressdb/progressdb/server/pkg/pebbledir"
)

// EraseResult describes what Erase did.
type EraseResult struct {
	erase.Result
	// Full is true when the whole store was erased: keys were destroyed
	// before a restart (their spans are not known) or a KEK rotation
	// replaced every wrapped value.
	Full bool
	// Nothing is true when no destroyed key was left to erase.
	Nothing bool
}

// Erased reports whether every key destroyed so far has been erased from
// the key store's files.
func (ks *KeyStore) Erased(ctx context.Context) (bool, error) {
	if err := ks.live(ctx); err != nil {
		return false, err
	}
	_, ok, err := ks.get([]byte(erasedKey))
	return ok, err
}

// Erase makes the keys destroyed so far unrecoverable from every file of
// the key store (the data store's erase step, package erase), then records
// that nothing is left to erase, unless a key was destroyed meanwhile
// (that one is erased by the next call).
func (ks *KeyStore) Erase(ctx context.Context, opts erase.Options) (EraseResult, error) {
	var res EraseResult
	if err := ks.live(ctx); err != nil {
		return res, err
	}
	ks.eraseMu.Lock()
	defer ks.eraseMu.Unlock()
	ks.mu.Lock()
	spans := slices.Clone(ks.spans)
	res.Full = ks.owedFull
	seen := ks.destroys
	_, erased, err := ks.get([]byte(erasedKey))
	ks.mu.Unlock()
	if err != nil {
		return res, fmt.Errorf("erase key store: %w", err)
	}
	if erased && len(spans) == 0 && !res.Full {
		res.Nothing = true
		return res, nil
	}
	if len(spans) == 0 {
		// Owed, but by whom is not known here: erase it all.
		res.Full = true
	}
	var ranges []erase.Span
	if res.Full {
		// Every key of the store is printable ASCII.
		ranges = []erase.Span{{Start: []byte{0}, End: []byte{0xff}}}
	} else {
		ranges = erase.Merge(ks.db, spans, erase.GapMerge)
	}
	if opts.Wait <= 0 {
		opts.Wait = ks.eraseWait
	}
	// A backup's staging copy holds the key store as it was before the
	// destroy (backups take it while no run destroys keys, so this is a
	// guard): wait for it to go, as the data store does.
	if opts.Held == nil {
		opts.Held = func() bool { return pebbledir.HasCheckpoints(ks.path) }
	}
	er, err := erase.Run(ctx, ks.db, ks.path, ranges, opts)
	res.Result = er
	if err != nil {
		return res, fmt.Errorf("erase key store: %w", err)
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.spans = ks.spans[len(spans):]
	if res.Full {
		ks.owedFull = false
	}
	if ks.destroys == seen {
		if err := ks.db.Set([]byte(erasedKey), nil, pebble.Sync); err != nil {
			return res, fmt.Errorf("erase key store: record: %w", err)
		}
	}
	return res, nil
}
