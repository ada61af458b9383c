package keystore

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/erase"
)

// A subject erasure (spec §12) needs the author until its keys are gone
// and its versions purged, and the data store must never hold the author
// in clear. So the request keeps it here, sealed under the receipt key:
//
//	ks:erasure:<id>   AES-256-GCM(receipt key, author), bound to the id
//
// An entry present is an erasure not yet completed: a run that finds one
// finishes it, whatever its trigger. Completing it deletes the entry, and
// the erase step removes it from every file of the store.

const erasureNS = "ks:erasure:"

// erasureAD binds a sealed author to its erasure: it does not open under
// another ID.
func erasureAD(id string) []byte { return []byte("pdb-erasure-1\x00" + id) }

// ErrNoErasure: no erasure of that ID is pending here.
var ErrNoErasure = errors.New("no such erasure pending in the key store")

// PutErasure records that author is to be erased by erasure id, synced.
func (ks *KeyStore) PutErasure(ctx context.Context, id, author string) error {
	if err := ks.live(ctx); err != nil {
		return err
	}
	if err := checkThread(id); err != nil {
		return fmt.Errorf("erasure id: %w", err)
	}
	sealed, err := SealAuthor(ks.receiptKey, id, author)
	if err != nil {
		return err
	}
	if p := ks.repl.Load(); p != nil {
		err = ks.propose(ctx, p, op{Op: opPutErasure, ID: id, Sealed: sealed}, false)
	} else {
		err = ks.putErasure(id, sealed)
	}
	if err != nil {
		return fmt.Errorf("record erasure %s: %w", id, err)
	}
	return nil
}

func (ks *KeyStore) putErasure(id string, sealed []byte) error {
	if err := checkThread(id); err != nil {
		return fmt.Errorf("erasure id: %w", err)
	}
	return ks.db.Set([]byte(erasureNS+id), sealed, pebble.Sync)
}

// ErasureAuthor returns the author erasure id erases (ErrNoErasure when
// it is not pending).
func (ks *KeyStore) ErasureAuthor(ctx context.Context, id string) (string, error) {
	if err := ks.live(ctx); err != nil {
		return "", err
	}
	v, ok, err := ks.get([]byte(erasureNS + id))
	switch {
	case err != nil:
		return "", fmt.Errorf("erasure %s: %w", id, err)
	case !ok:
		return "", fmt.Errorf("erasure %s: %w", id, ErrNoErasure)
	}
	return OpenAuthor(ks.receiptKey, id, v)
}

// SealAuthor seals the author of erasure id under a receipt key, bound to
// the id: how the key store keeps it, and a cluster's etcd record too
// (spec §11.1), so that only a holder of the receipt key reads it.
func SealAuthor(receiptKey []byte, id, author string) ([]byte, error) {
	a, err := newAEAD(receiptKey)
	if err != nil {
		return nil, fmt.Errorf("erasure %s: seal the author: %w", id, err)
	}
	return a.Seal(nil, nil, []byte(author), erasureAD(id)), nil
}

// OpenAuthor opens what SealAuthor sealed for erasure id.
func OpenAuthor(receiptKey []byte, id string, sealed []byte) (string, error) {
	a, err := newAEAD(receiptKey)
	if err != nil {
		return "", fmt.Errorf("erasure %s: open the author: %w", id, err)
	}
	author, err := a.Open(nil, nil, sealed, erasureAD(id))
	if err != nil {
		return "", fmt.Errorf("erasure %s: the sealed author does not open: %w", id, err)
	}
	return string(author), nil
}

// PendingErasures lists the IDs of the erasures not yet completed, in ID
// order.
func (ks *KeyStore) PendingErasures(ctx context.Context) ([]string, error) {
	if err := ks.live(ctx); err != nil {
		return nil, err
	}
	prefix := []byte(erasureNS)
	it, err := ks.db.NewIter(prefixRange(prefix))
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var ids []string
	for valid := it.First(); valid; valid = it.Next() {
		ids = append(ids, string(it.Key()[len(prefix):]))
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("pending erasures: %w", err)
	}
	return ids, nil
}

// CompleteErasure deletes erasure id's entry, synced; the key store owes
// an erase from then on (Erase removes the sealed author from its files).
func (ks *KeyStore) CompleteErasure(ctx context.Context, id string) error {
	if err := ks.live(ctx); err != nil {
		return err
	}
	var err error
	if p := ks.repl.Load(); p != nil {
		// Its put's entry holds the sealed author: a destroy.
		err = ks.propose(ctx, p, op{Op: opCompleteErasure, ID: id}, true)
	} else {
		err = ks.completeErasure(id)
	}
	if err != nil {
		return fmt.Errorf("complete erasure %s: %w", id, err)
	}
	return nil
}

func (ks *KeyStore) completeErasure(id string) error {
	key := []byte(erasureNS + id)
	b := ks.db.NewBatch()
	defer b.Close()
	_ = b.Delete(key, nil)
	return ks.commitDestroy(b, []erase.Span{pointSpan(key)}, pebble.Sync)
}
