package keystore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strconv"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A key store records its own identity and the identity of the data
// database whose keys it holds (spec §12): a database sealed under one key
// store never opens with another (a volume not mounted, a path typo, a
// restored copy's key store), since the keys a fresh or foreign store
// hands out would seal writes no reader of the right store can open.
//
//	ks:id   the key store's identity, made once
//	ks:db   the data database's identity (store.DatabaseID)
//
// Format 1 (the release that introduced sealing) had neither; format 2
// has both. A binary refuses a format it does not know, so an older one
// cannot open a store whose binding it would not check.
const (
	idKey       = "ks:id"
	databaseKey = "ks:db"
)

// Formats of the key store. FormatLegacy stores opened by this release are
// raised to FormatBound when they are bound to their database (Bind).
const (
	// FormatLegacy is what the release that introduced sealing wrote.
	FormatLegacy = 1
	// FormatBound is the format this release writes.
	FormatBound = 2
)

// Sentinel errors of the binding.
var (
	// ErrNoKeyStore: Options.MustExist was set and the folder is missing,
	// empty, or holds no key store. Nothing was created.
	ErrNoKeyStore = errors.New("no key store")
	// ErrUnknownFormat: the key store was written in a format this binary
	// does not know (a newer release's); a *FormatError carries both.
	ErrUnknownFormat = errors.New("unknown key store format")
)

// FormatError refuses a key store whose format this binary does not read.
type FormatError struct {
	Found string // the key store's format, as recorded
	Known int    // the newest format this binary reads
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%v: the key store is in format %s, this binary reads formats %d to %d (docs/upgrading.md)",
		ErrUnknownFormat, e.Found, FormatLegacy, e.Known)
}

func (e *FormatError) Unwrap() error { return ErrUnknownFormat }

// parseFormat reads a recorded format; a *FormatError for one this binary
// does not know.
func parseFormat(v []byte) (int, error) {
	n, err := strconv.Atoi(string(v))
	if err != nil || n < FormatLegacy || n > FormatBound {
		return 0, &FormatError{Found: strconv.Quote(string(v)), Known: FormatBound}
	}
	return n, nil
}

// checkExists returns ErrNoKeyStore unless path holds a Pebble database.
// It only reads, so that a sealed database's missing key store is refused
// without leaving an empty one behind.
func checkExists(path string) error {
	desc, err := pebble.Peek(path, vfs.Default)
	switch {
	case errors.Is(err, fs.ErrNotExist) || (err == nil && !desc.Exists):
		return fmt.Errorf("open key store %q: %w (missing or empty folder)", path, ErrNoKeyStore)
	case err != nil:
		return fmt.Errorf("open key store %q: %w", path, err)
	}
	return nil
}

// ID is the key store's identity; "" for a format-1 store not bound yet.
func (ks *KeyStore) ID() string {
	ks.bindMu.RLock()
	defer ks.bindMu.RUnlock()
	return ks.id
}

// Database is the identity of the data database the key store belongs to;
// "" when it is bound to none yet (created by a test or a tool, or in
// format 1).
func (ks *KeyStore) Database() string {
	ks.bindMu.RLock()
	defer ks.bindMu.RUnlock()
	return ks.database
}

// Bind records that the key store belongs to the data database databaseID,
// giving the store an identity when it has none and raising it to
// FormatBound; synced. The data store calls it when it seals a database,
// and when a restore gives a copy its new identity (store.BecomeCopy).
func (ks *KeyStore) Bind(ctx context.Context, databaseID string) error {
	if err := ks.live(ctx); err != nil {
		return err
	}
	if databaseID == "" {
		return errors.New("bind key store: empty database id")
	}
	ks.bindMu.Lock()
	defer ks.bindMu.Unlock()
	if ks.database == databaseID && ks.id != "" {
		return nil
	}
	id := ks.id
	if id == "" {
		id = newID()
	}
	b := ks.db.NewBatch()
	defer b.Close()
	_ = b.Set([]byte(idKey), []byte(id), nil)
	_ = b.Set([]byte(databaseKey), []byte(databaseID), nil)
	_ = b.Set([]byte(formatKey), []byte(strconv.Itoa(FormatBound)), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("bind key store to database %s: %w", databaseID, err)
	}
	ks.id, ks.database = id, databaseID
	return nil
}

// TakeIdentity records id as the key store's identity and databaseID as
// its database's, synced, whatever they were: a replica's key store that
// a snapshot replaced with a copy of its leader's keeps the replica's
// own identity (store.Store.RebindKeyStore, docs/replication-design.md
// §7).
func (ks *KeyStore) TakeIdentity(ctx context.Context, id, databaseID string) error {
	if err := ks.live(ctx); err != nil {
		return err
	}
	if id == "" || databaseID == "" {
		return errors.New("key store identity: empty id")
	}
	ks.bindMu.Lock()
	defer ks.bindMu.Unlock()
	if ks.id == id && ks.database == databaseID {
		return nil
	}
	b := ks.db.NewBatch()
	defer b.Close()
	_ = b.Set([]byte(idKey), []byte(id), nil)
	_ = b.Set([]byte(databaseKey), []byte(databaseID), nil)
	_ = b.Set([]byte(formatKey), []byte(strconv.Itoa(FormatBound)), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("key store identity %s of database %s: %w", id, databaseID, err)
	}
	ks.id, ks.database = id, databaseID
	return nil
}

// loadBinding reads the identities a store of format records.
func (ks *KeyStore) loadBinding(format int) error {
	if format < FormatBound {
		return nil
	}
	id, ok, err := ks.get([]byte(idKey))
	if err != nil {
		return err
	}
	if !ok || len(id) == 0 {
		return fmt.Errorf("%w: format %d without an identity (%s)", ErrUnknownFormat, format, idKey)
	}
	db, _, err := ks.get([]byte(databaseKey))
	if err != nil {
		return err
	}
	ks.id, ks.database = string(id), string(db)
	return nil
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
