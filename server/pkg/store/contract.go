package store

// This file fixes the exported surface other packages build against.
// Implementations replace the bodies; signatures change only together with
// every caller.

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/cockroachdb/pebble/v2"
)

var errTODO = errors.New("store: not implemented yet")

// Store is the chat store. Build one with Open and pass it down; no globals.
type Store struct {
	db *pebble.DB
}

// Open opens (creating if needed) the database at path. It returns an error
// wrapping ErrDatabaseLocked when another process has it open. On first open
// of a database that has never had a deletion index (legacy data), it builds
// the index with one full scan.
func Open(path string, opts Options) (*Store, error) { return nil, errTODO }

// Close closes the database cleanly.
func (s *Store) Close() error { return errTODO }

// DB exposes the Pebble handle for tooling that measures or inspects raw
// keys (benchmarks, fault checks). Application code uses the methods.
func (s *Store) DB() *pebble.DB { return s.db }

// ValidateID checks an ID against ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$; the
// error wraps ErrInvalidID and names the rule.
func ValidateID(id string) error { return errTODO }

// NewID returns a new time-sortable ID (ULID-like, Crockford base32).
func (s *Store) NewID() string { return "" }

// ListOptions page through threads or messages. Cursor is opaque ("" = start).
type ListOptions struct {
	Limit          int // default 100, max 1000
	Cursor         string
	IncludeDeleted bool
}

// CreateThread stores a new thread. t.ID may be empty (generated); ErrExists
// when the ID is taken (even by a soft-deleted thread).
func (s *Store) CreateThread(ctx context.Context, t Thread) (Thread, error) { return Thread{}, errTODO }

// GetThread returns the thread's metadata, deleted or not. ErrNotFound when
// absent; ErrMalformed when the stored record cannot be decoded.
func (s *Store) GetThread(ctx context.Context, tid string) (Thread, error) { return Thread{}, errTODO }

// ListThreads lists threads in ID order.
func (s *Store) ListThreads(ctx context.Context, o ListOptions) ([]Thread, string, error) {
	return nil, "", errTODO
}

// DeleteThread soft-deletes; a repeated delete keeps the first deleted_ts.
func (s *Store) DeleteThread(ctx context.Context, tid string) (Thread, error) {
	return Thread{}, errTODO
}

// RestoreThread undoes a soft delete; ErrPurgeInProgress once a purge began.
func (s *Store) RestoreThread(ctx context.Context, tid string) (Thread, error) {
	return Thread{}, errTODO
}

// SetLegalHold sets or clears the legal hold flag.
func (s *Store) SetLegalHold(ctx context.Context, tid string, hold bool) (Thread, error) {
	return Thread{}, errTODO
}

// AppendMessage adds a message (version 1) to a live thread. m.ID may be
// empty. ErrNotFound for an absent or deleted thread, ErrExists when the
// message ID is already used anywhere.
func (s *Store) AppendMessage(ctx context.Context, tid string, m Message) (Message, error) {
	return Message{}, errTODO
}

// GetMessage returns the latest version (a tombstone included).
func (s *Store) GetMessage(ctx context.Context, tid, mid string) (Message, error) {
	return Message{}, errTODO
}

// EditMessage appends a new version with body; ErrNotFound if deleted.
func (s *Store) EditMessage(ctx context.Context, tid, mid string, body json.RawMessage) (Message, error) {
	return Message{}, errTODO
}

// DeleteMessage appends a tombstone version; repeated delete keeps the first.
func (s *Store) DeleteMessage(ctx context.Context, tid, mid string) (Message, error) {
	return Message{}, errTODO
}

// RestoreMessage appends a live version carrying the last live body;
// ErrPurgeInProgress once the message's purge began.
func (s *Store) RestoreMessage(ctx context.Context, tid, mid string) (Message, error) {
	return Message{}, errTODO
}

// ListMessages lists the latest version of each message in thread order.
func (s *Store) ListMessages(ctx context.Context, tid string, o ListOptions) ([]Message, string, error) {
	return nil, "", errTODO
}

// ListVersions lists every version of a message, oldest first.
func (s *Store) ListVersions(ctx context.Context, tid, mid string) ([]Message, error) {
	return nil, errTODO
}

// ScanDeletionIndex calls fn for every index entry of kind with
// from <= DeletedTS <= to, in deletion-time order. It reads a snapshot, so fn
// may purge. Returning ErrStopScan from fn ends the scan without error.
func (s *Store) ScanDeletionIndex(ctx context.Context, kind ItemKind, from, to int64, fn func(DeletionEntry) error) error {
	return errTODO
}

// ErrStopScan ends ScanDeletionIndex early without error.
var ErrStopScan = errors.New("stop scan")

// RebuildDeletionIndex drops and rebuilds the deletion index from a full
// scan; records that cannot be decoded are indexed at time 0 so retention
// reports them. Returns the number of entries written.
func (s *Store) RebuildDeletionIndex(ctx context.Context) (int, error) { return 0, errTODO }

// StampDeletion gives a deleted item that has no usable deleted_ts the time
// ts (legacy data), moving its index entry. ErrNotEligible if it is no longer
// deleted or already has a deleted_ts.
func (s *Store) StampDeletion(ctx context.Context, e DeletionEntry, ts int64) error { return errTODO }

// BeginPurge re-checks, under the thread's lock, that the item is still
// soft-deleted with deleted_ts == m.DeletedTS (threads: and not on legal
// hold), then writes the purge marker with a synced write. ErrNotEligible
// otherwise. From then on restore answers ErrPurgeInProgress.
func (s *Store) BeginPurge(ctx context.Context, m PurgeMarker) error { return errTODO }

// PurgeThread deletes every key under thread:<tid>: and version:msg:<mid>:
// for each of its messages, plus their deletion-index entries, in batches of
// opts.BatchSize keys, metadata last. Idempotent. Returns keys deleted.
// Batches are not synced; call Sync before relying on durability.
func (s *Store) PurgeThread(ctx context.Context, tid string, opts PurgeOptions) (int, error) {
	return 0, errTODO
}

// PurgeMessage deletes one message's versions, its log entry and its index
// entry, in batches. Idempotent. Returns keys deleted.
func (s *Store) PurgeMessage(ctx context.Context, tid, mid string, opts PurgeOptions) (int, error) {
	return 0, errTODO
}

// Sync makes every earlier write durable (one synced write).
func (s *Store) Sync(ctx context.Context) error { return errTODO }

// PendingPurges lists purge markers left by earlier (possibly crashed) runs.
func (s *Store) PendingPurges(ctx context.Context) ([]PurgeMarker, error) { return nil, errTODO }

// ClearPurges removes purge markers (synced) once their audit records are durable.
func (s *Store) ClearPurges(ctx context.Context, ms []PurgeMarker) error { return errTODO }

// ItemExists reports whether any key of the item remains (thread: any key
// under thread:<id>:; message: any version key).
func (s *Store) ItemExists(ctx context.Context, kind ItemKind, id string) (bool, error) {
	return false, errTODO
}

// Bulk loads data fast through large unsynced batches (seeding, benchmarks,
// fixtures). It writes the same keys and index entries as the normal API.
type Bulk struct{ s *Store }

// NewBulk starts a bulk load.
func (s *Store) NewBulk() *Bulk { return &Bulk{s: s} }

// PutThread writes a thread's metadata (and its index entry when deleted).
func (b *Bulk) PutThread(t Thread) error { return errTODO }

// PutMessage writes every version of one message (oldest first), its log
// entry, and its index entry when the latest version is a tombstone.
func (b *Bulk) PutMessage(versions []Message) error { return errTODO }

// PutRaw writes a raw key/value (fixtures of legacy or corrupt records).
func (b *Bulk) PutRaw(key, value []byte) error { return errTODO }

// Close commits what is buffered and syncs.
func (b *Bulk) Close() error { return errTODO }
