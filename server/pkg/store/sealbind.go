package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// A sealed database records that it is sealed and the identity of the key
// store it is sealed under (spec §12); the key store records the
// database's identity in turn (keystore/binding.go). Open checks both
// before any read or write of content: without a key store a sealed
// database would answer every content as null and write new content in
// clear, and with another one (a fresh store in a folder not mounted, a
// copy's) it would acknowledge writes its own readers cannot open.
//
// Sealing a database is two synced writes, in this order: the key store
// is created (or bound) naming the database, then the database records
// the key store and its raised format. A crash between the two leaves a
// key store bound to a database that does not say so yet; the next open
// with it finishes the marking.
const sealKey = "sys:seal"

// sealRecord is the value of sealKey. KeyStoreID is "" for a database
// sealed before the marker existed, until its first open with the KEK
// identifies its key store.
type sealRecord struct {
	KeyStoreID string `json:"key_store_id,omitempty"`
	SealedAt   int64  `json:"sealed_at"`
}

// SealState is what OpenSealer is told of the database before it opens a
// key store: whether it is sealed, and under which key store.
type SealState struct {
	DatabaseID string
	Sealed     bool
	// KeyStoreID is the key store the database is sealed under; "" when
	// it is not sealed, or was sealed before the marker.
	KeyStoreID string
}

// ForeignKeyStoreError refuses a key store that is not the database's.
type ForeignKeyStoreError struct {
	DatabaseID string // this database
	SealedWith string // the key store it records ("" when not recorded yet)
	KeyStoreID string // the key store offered
	BoundTo    string // the database that key store records ("" for none)
}

func (e *ForeignKeyStoreError) Error() string {
	want := "its own"
	if e.SealedWith != "" {
		want = "key store " + e.SealedWith
	}
	owner := "no database (a new, empty key store)"
	if e.BoundTo != "" {
		owner = "database " + e.BoundTo
	}
	return fmt.Sprintf("%v: database %s is sealed under %s, and the key store offered (%s) belongs to %s",
		ErrForeignKeyStore, e.DatabaseID, want, orDash(e.KeyStoreID), owner)
}

func (e *ForeignKeyStoreError) Unwrap() error { return ErrForeignKeyStore }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func readSeal(r pebble.Reader) (rec sealRecord, ok bool, err error) {
	v, err := getFrom(r, []byte(sealKey))
	switch {
	case errors.Is(err, ErrNotFound):
		return rec, false, nil
	case err != nil:
		return rec, false, err
	}
	if err := json.Unmarshal(v, &rec); err != nil {
		return rec, false, fmt.Errorf("%w: seal record: %w", ErrMalformed, err)
	}
	return rec, true, nil
}

// SealInfo is what a database records of its seal.
type SealInfo struct {
	Sealed     bool
	KeyStoreID string
}

// SealInfo returns whether the database is sealed and under which key store.
func (s *Store) SealInfo(ctx context.Context) (SealInfo, error) {
	if err := ctx.Err(); err != nil {
		return SealInfo{}, err
	}
	rec, ok, err := readSeal(s.db)
	return SealInfo{Sealed: ok, KeyStoreID: rec.KeyStoreID}, err
}

// bindSealer gives the store its Sealer at Open (Options.Sealer, or the
// one Options.OpenSealer opens once it knows the database's state), and
// refuses what must not open: a sealed database without one, or with a
// key store that is not its own. A database opened with a Sealer for the
// first time is sealed here. It returns the closer of a Sealer it opened,
// for Open to close on a later failure.
func (s *Store) bindSealer(ctx context.Context, opts Options) (io.Closer, error) {
	rec, sealed, err := readSeal(s.db)
	if err != nil {
		return nil, err
	}
	s.sealed.Store(sealed)
	sealer, closer := opts.Sealer, opts.Closer
	var opened io.Closer
	if sealer == nil && opts.OpenSealer != nil {
		id, err := s.DatabaseID(ctx, true)
		if err != nil {
			return nil, err
		}
		sealer, closer, err = opts.OpenSealer(ctx, SealState{DatabaseID: id, Sealed: sealed, KeyStoreID: rec.KeyStoreID})
		if err != nil {
			return nil, err
		}
		opened = closer
	}
	if sealer == nil {
		if sealed {
			return opened, ErrSealedNeedsKEK
		}
		return opened, nil
	}
	s.sealer, s.closer = sealer, closer
	return opened, s.sealWith(ctx, sealer, rec, sealed, opts.Restoring)
}

// sealWith checks that sealer's key store is the database's, or, for a
// database not sealed yet (or sealed before the marker), binds it and
// marks the database sealed. While a restore is unfinished the key store
// may still name the backup's origin: BecomeCopy binds it to the copy.
func (s *Store) sealWith(ctx context.Context, sealer Sealer, rec sealRecord, sealed, restoring bool) error {
	id, err := s.DatabaseID(ctx, true)
	if err != nil {
		return err
	}
	ksID, ksDB := sealer.ID(), sealer.Database()
	foreign := &ForeignKeyStoreError{DatabaseID: id, SealedWith: rec.KeyStoreID, KeyStoreID: ksID, BoundTo: ksDB}
	ownDB := ksDB == id || restoring
	if sealed && rec.KeyStoreID != "" {
		if ksID != rec.KeyStoreID || !ownDB {
			return foreign
		}
		return nil
	}
	// Not sealed yet, or sealed before the marker: the key store must be
	// this database's (a crash between the two writes) or bound to none.
	if ksDB != "" && !ownDB {
		return foreign
	}
	// A restore binds its key store to the copy (BecomeCopy), but one
	// without an identity yet (format 1) gets it here.
	if ksDB != id && (!restoring || sealer.ID() == "") {
		if err := sealer.Bind(ctx, id); err != nil {
			return err
		}
	}
	return s.markSealed(ctx, sealer.ID())
}

// markSealed records that the database is sealed under key store ksID and
// raises its format, synced.
func (s *Store) markSealed(ctx context.Context, ksID string) error {
	v, err := json.Marshal(sealRecord{KeyStoreID: ksID, SealedAt: s.now().UnixNano()})
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	_ = b.Set([]byte(sealKey), v, nil)
	r, err := s.raiseIn(b, FormatSealed, "sealing")
	if err != nil {
		_ = b.Close()
		return err
	}
	if err := s.apply(ctx, write{kind: writeState, batch: b, sync: true}); err != nil {
		return fmt.Errorf("mark the database sealed: %w", err)
	}
	s.sealed.Store(true)
	s.noteRaise(r)
	return nil
}

// identityTaker is a Sealer whose identity can be set
// (*keystore.KeyStore's TakeIdentity).
type identityTaker interface {
	TakeIdentity(ctx context.Context, id, databaseID string) error
}

// RebindKeyStore gives a sealed database's key store the identity
// keyStoreID ("": the one it has), bound to this database, and records
// it as the key store the database is sealed under: a replica whose
// database and key store a snapshot replaced with copies of its
// leader's keeps its own key store's identity (docs/replication-design.md
// §7). A plain database is left as it is. The key store first, then the
// database, each synced: the caller swaps in neither before both are
// done.
func (s *Store) RebindKeyStore(ctx context.Context, keyStoreID string) error {
	if s.sealer == nil {
		return nil
	}
	it, ok := s.sealer.(identityTaker)
	if !ok {
		return fmt.Errorf("%w: the key store's identity cannot be set", ErrInvalidArgument)
	}
	if keyStoreID == "" {
		keyStoreID = s.sealer.ID()
	}
	id, err := s.DatabaseID(ctx, true)
	if err != nil {
		return err
	}
	if err := it.TakeIdentity(ctx, keyStoreID, id); err != nil {
		return err
	}
	rec, _, err := readSeal(s.db)
	if err != nil {
		return err
	}
	if rec.KeyStoreID == keyStoreID {
		return nil
	}
	rec.KeyStoreID = keyStoreID
	v, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	_ = b.Set([]byte(sealKey), v, nil)
	if err := s.apply(ctx, write{kind: writeState, batch: b, sync: true}); err != nil {
		return fmt.Errorf("record the key store the database is sealed under: %w", err)
	}
	return nil
}

// refusePlain is the store's own guard against plaintext in a sealed
// database, whatever a caller forgot: a write of content without a
// Sealer into a database that records it is sealed is refused.
func (s *Store) refusePlain() error {
	if s.sealer == nil && s.sealed.Load() {
		return ErrSealedNeedsKEK
	}
	return nil
}
