// Package store keeps threads, messages and message versions in an embedded
// Pebble database, together with the deletion index and the purge primitives
// the retention subsystem is built on.
//
// Key layout (spec §2):
//
//	thread:<tid>:meta                       thread metadata (JSON)
//	thread:<tid>:log:<created_ns 20d>:<mid> message order within the thread
//	version:msg:<mid>:<version 20d>         every version of a message (JSON)
//	idx:del:t:<deleted_ns 20d>:<tid>        deletion index, threads
//	idx:del:m:<deleted_ns 20d>:<mid>        deletion index, messages (value: tid)
//	idx:live:<tid>:                         live-thread index (threads not deleted)
//	thread:<tid>:retention                  retention override (JSON)
//	thread:<tid>:att:<mid>:<aid>            attachment metadata (JSON, attachments.go)
//	idx:pol:<tid>                           threads with a retention override
//	sys:purge:t:<tid> / sys:purge:m:<mid>   purge in progress (pending audit record)
//	sys:stamp:t:<tid> / sys:stamp:m:<mid>   stamp whose audit record is pending
//	sys:blob:<tid>/<mid>/<aid>              blob deletion owed by a purge (owedblobs.go)
//	sys:retention:pause                     retention pause switch
//	sys:fence                               newest fencing token seen (cluster mode, fence.go)
//	sys:format                              the database's format (format.go)
//	sys:seal                                sealed, and under which key store (sealbind.go)
//	sys:...                                 other server state
//
// IDs cannot contain ':', so no thread's prefix covers another thread's keys.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Sentinel errors callers act on.
var (
	ErrNotFound        = errors.New("not found")
	ErrInvalidID       = errors.New("invalid id")
	ErrExists          = errors.New("already exists")
	ErrPurgeInProgress = errors.New("purge in progress")
	ErrNotEligible     = errors.New("no longer eligible for purge")
	ErrInvalidArgument = errors.New("invalid argument")
	ErrMalformed       = errors.New("malformed record")
	ErrDatabaseLocked  = errors.New("database is in use by another process")
	ErrClosed          = errors.New("store closed")
	ErrStorageFailed   = errors.New("storage failed")
	// ErrLegalHold refuses a change the thread's legal hold forbids.
	ErrLegalHold = errors.New("under legal hold")

	// ErrNoDatabase: Options.MustExist was set and no database is there.
	ErrNoDatabase = errors.New("no database")

	// ErrIDUnavailable refuses a client-chosen message ID that is taken.
	// Message IDs are unique across all threads, so the text says so and
	// nothing more: not whether, or in which thread, the ID is in use.
	ErrIDUnavailable = errors.New("not available: message ids are unique across all threads; omit id to have one generated")
)

// Thread is a thread's metadata as stored (spec §2). Timestamps are Unix ns, UTC.
type Thread struct {
	ID        string `json:"id"`
	Title     string `json:"title"`
	Author    string `json:"author"`
	CreatedTS int64  `json:"created_ts"`
	UpdatedTS int64  `json:"updated_ts"`
	Deleted   bool   `json:"deleted"`
	DeletedTS int64  `json:"deleted_ts"`
	LegalHold bool   `json:"legal_hold"`
	// Key and Sealed are the seal of Title and Author (spec §12, seal.go):
	// the number of the creator's data key in the thread and the sealed
	// bytes in standard base64; 0 and "" for a plain record.
	Key    uint32 `json:"key,omitempty"`
	Sealed string `json:"sealed,omitempty"`
	// Unreadable: sealed, and its key is gone; Title and Author are empty.
	Unreadable bool `json:"-"`
}

// Message is one stored version of a message (spec §2).
type Message struct {
	ID        string          `json:"id"`
	Thread    string          `json:"thread"`
	Author    string          `json:"author"`
	Body      json.RawMessage `json:"body"`
	TS        int64           `json:"ts"`
	Version   int64           `json:"version"`
	Deleted   bool            `json:"deleted"`
	DeletedTS int64           `json:"deleted_ts"`
	// CreatedTS is the message's creation time, its first version's ts:
	// the reads that return a message fill it; a version does not store it.
	CreatedTS int64 `json:"-"`
	// Key and Sealed are the seal of Author and Body (spec §12, seal.go),
	// as Thread's; 0 and "" for a plain version.
	Key    uint32 `json:"key,omitempty"`
	Sealed string `json:"sealed,omitempty"`
	// Unreadable: sealed, and its key is gone; Author and Body are empty.
	Unreadable bool `json:"-"`
}

// ItemKind tells threads from messages in the deletion index and purge markers.
type ItemKind string

const (
	KindThread  ItemKind = "thread"
	KindMessage ItemKind = "message"
)

// DeletionEntry is one entry of the deletion index.
type DeletionEntry struct {
	Kind      ItemKind
	ID        string // thread or message ID
	ThreadID  string // for messages: the thread it belongs to; for threads: ID
	DeletedTS int64  // as indexed; 0 for legacy or unreadable records
}

// PurgeMarker is written, synced, before the first delete of an item and
// removed once the item's audit record is durable. It is the pending audit
// record that lets the next run finish an interrupted purge or write the
// missing audit record (marked recovered).
type PurgeMarker struct {
	Kind      ItemKind `json:"kind"`
	ID        string   `json:"id"`
	ThreadID  string   `json:"thread_id"`
	DeletedTS int64    `json:"deleted_ts"`
	RunID     string   `json:"run_id"`
	StartedAt int64    `json:"started_at"`
	// Cause is why the item is purged (deleted, max_age, max_messages), so
	// that a record written on recovery names it too; empty in markers
	// written before policies, which were all "deleted".
	Cause string `json:"cause,omitempty"`
	// Confirmed is set once the claim was re-checked under the thread's
	// lock and the item's deletes may begin (ConfirmPurge, claims.go).
	Confirmed bool `json:"confirmed,omitempty"`
	// Replayed marks the claim of a purge repeated on a restored database
	// (BeginReplayPurge): the audit trail recorded it, so no hold or
	// override gives it back.
	Replayed bool `json:"replayed,omitempty"`
	// ErasureID names the subject erasure a claim of cause subject is for,
	// and Versions the message's versions then, so that a record written
	// on recovery carries both (BeginSubjectPurge).
	ErasureID string `json:"erasure_id,omitempty"`
	Versions  int64  `json:"versions,omitempty"`
	// Shredded is set (synced, OweShred) before a thread purge destroys
	// the thread's data keys (spec §12): from then on the purge must
	// finish and its record says shredded, whichever run writes it.
	Shredded bool `json:"shredded,omitempty"`
}

// StampMarker is written in the same synced batch as a stamp (the start of
// a legacy record's retention clock) and removed once the stamp's audit
// record is durable, so a crash between the two cannot lose the record: the
// next run writes it, marked recovered.
type StampMarker struct {
	Kind      ItemKind `json:"kind"`
	ID        string   `json:"id"`
	ThreadID  string   `json:"thread_id"`
	DeletedTS int64    `json:"deleted_ts"` // the stamp
	RunID     string   `json:"run_id"`
}

// PurgeOptions control a chunked purge.
type PurgeOptions struct {
	// BatchSize is the number of keys per delete batch (default 1000).
	BatchSize int
	// BeforeBatch, when set, is called before every batch is committed; an
	// error stops the purge before that batch (used for the lease check and
	// pacing). The purge returns that error wrapped.
	BeforeBatch func(ctx context.Context) error
	// BatchLimit, when set, is asked as each batch starts filling and may
	// make that batch smaller than BatchSize (never larger). A large batch
	// holds up the commits queued behind it, so the retention runner
	// commits small ones while user writes compete.
	BatchLimit func() int
	// Erase, when set, collects the key spans the purge removes, for
	// Store.Erase.
	Erase *EraseSpans
	// Shredded: the thread's data keys are destroyed (spec §12), so its
	// sealed records are noise and need no erase: PurgeThread adds to
	// Erase only the spans of plain records it meets (written before
	// sealing).
	Shredded bool
	// Marker is the claim the purge carries out: the blob deletions its
	// attachments owe name its run and cause (owedblobs.go).
	Marker PurgeMarker
}

// Options configure Open.
type Options struct {
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Logger receives Pebble's own messages; they are dropped when nil.
	Logger *slog.Logger
	// Fatal is called when Pebble meets an error it cannot continue from
	// (a failed log write or sync, a failed manifest write, corruption). It
	// must not return. Nil means: log storage_fatal and exit the process
	// with status 1. Pebble reports these by panicking with its commit
	// mutex held, so a process that recovered would hang every later
	// write; stopping lets a supervisor restart it on a sane disk.
	Fatal func(detail string)
	// EraseWait bounds how long Erase waits for snapshots and iterators
	// that pin purged data (30s when zero).
	EraseWait time.Duration
	// MustExist opens only a database that is already there: Open creates
	// nothing (no folder, no lock file) and returns ErrNoDatabase instead,
	// so a mistyped path is not taken for an empty, healthy database.
	MustExist bool
	// Cache, when set, is a block cache shared with other stores (a
	// cluster node's shards); Pebble takes its own reference, and the
	// caller releases its own (Unref) once it has opened the stores. Nil:
	// a cache of CacheSize of the store's own.
	Cache *pebble.Cache
	// MemTableSize, when set, replaces the default memtable size
	// (DefaultMemTableSize). Pebble reserves a store's memtables out of its
	// block cache, so stores sharing a cache share that budget too.
	MemTableSize uint64
	// Sealer, when set, seals the content of every new write (spec §12);
	// nil: writes are plain. Sealed records are read either way (without
	// a Sealer they read as Unreadable).
	Sealer Sealer
	// Closer, when set, is closed by Close after the database: the key
	// store behind Sealer when it was opened for this store alone.
	Closer io.Closer
	// OpenSealer, when set and Sealer is not, opens the key store once
	// Open knows the database's identity and whether it is sealed
	// (sealbind.go), so that a sealed database's key store is opened only
	// if it exists and a new one is bound to this database at creation. It
	// returns the Sealer and what Close closes; nil, nil: open plain
	// (refused for a sealed database).
	OpenSealer func(ctx context.Context, st SealState) (Sealer, io.Closer, error)
	// Restoring opens a folder that holds an unfinished restore (its
	// marker, restore.go): only the restore that finishes it may.
	Restoring bool
}
