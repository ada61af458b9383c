package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/progressdb/progressdb/server/pkg/pebbledir"
)

// Store is the chat store. Build one with Open and pass it down; no globals.
type Store struct {
	db     *pebble.DB
	path   string
	now    func() time.Time
	ids    *idGen
	locks  stripes
	closed atomic.Bool
	fatal  *fatalHandler
	// eraseWait bounds Erase's waits for readers that pin purged data.
	eraseWait time.Duration

	// fence refuses writes of a deposed owner (fence.go).
	fence fence

	// userWrites counts committed writes of the API (threads and
	// messages), so that a purge can tell when it competes with them.
	userWrites atomic.Uint64

	// threads remembers threads appends found live (livememo.go).
	threads liveMemo

	// batches counts the writes each fsync of the log carries
	// (syncbatch.go).
	batches *syncBatches

	// sealer seals new writes' content (seal.go); nil: plain.
	sealer Sealer
	closer io.Closer // Options.Closer
	// sealed: the database records it is sealed (sealbind.go).
	sealed atomic.Bool

	log *slog.Logger // Options.Logger; may be nil

	// raftLog is the shard's Raft log once loaded (raftlog.go): one
	// value per store, so that its cached state has one owner.
	raftLog atomic.Pointer[RaftLog]
	// repl, when set, makes writes proposals to the shard's Raft group
	// (command.go).
	repl atomic.Pointer[replication]
	// effects applies the commands' effects by kind (SetEffects); nil:
	// none.
	effects [effectKinds]atomic.Pointer[Effects]

	// idemScopes counts each scope's idempotency keys (idempotency.go).
	idemScopes idemScopes

	// checkpoints counts the checkpoints taken (Checkpoints).
	checkpoints atomic.Uint64
}

// DefaultMemTableSize is larger than Pebble's 4 MiB default so bulk loads
// and purges of large threads flush fewer, larger files.
const DefaultMemTableSize = 32 << 20

// CacheSize is the block cache of a store that has its own. Pebble reserves
// its memtables out of the cache, so it must be well above twice the
// memtable size: at 64 MiB nothing was ever cached and every purge seek read
// its block from disk again.
const CacheSize = 128 << 20

// Open opens (creating if needed) the database at path. It returns an error
// wrapping ErrDatabaseLocked when another process has it open. On first open
// of a database whose indexes are older than this version (legacy data, or
// a database from before the live-thread index), it builds them with one
// full scan.
func Open(path string, opts Options) (*Store, error) {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	fatal := &fatalHandler{fn: opts.Fatal, log: opts.Logger}
	if !opts.Restoring {
		if err := CheckRestored(path); err != nil {
			return nil, fmt.Errorf("open store %q: %w", path, err)
		}
	}
	if opts.MustExist {
		if err := mustExist(path); err != nil {
			return nil, err
		}
	}
	warnIfOpen(opts.Logger, path)
	memTable := opts.MemTableSize
	if memTable == 0 {
		memTable = DefaultMemTableSize
	}
	batches := newSyncBatches()
	db, err := pebbledir.Open(path, pebbledir.Options{
		OnLogSync:    batches.syncing,
		Logger:       opts.Logger,
		Fatal:        fatal.stop,
		MemTableSize: memTable,
		CacheSize:    CacheSize,
		Cache:        opts.Cache, // used instead of CacheSize when set
		MustExist:    opts.MustExist,
	})
	if err != nil {
		if errors.Is(err, pebble.ErrDBDoesNotExist) {
			return nil, fmt.Errorf("open store %q: %w", path, ErrNoDatabase)
		}
		if pebbledir.IsLocked(err) {
			return nil, fmt.Errorf("open store %q: %w (is a progressdb server running on it?): %w", path, ErrDatabaseLocked, err)
		}
		return nil, fmt.Errorf("open store %q: %w", path, err)
	}
	// The format is checked before anything else is read or written.
	if _, _, err := readFormat(db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %q: %w", path, err)
	}
	// Only the process holding Pebble's lock may remove staging folders:
	// another one's backup may be reading its own.
	if err := pebbledir.RemoveStaleCheckpoints(path); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %q: remove a backup's staging checkpoint left by a killed process: %w", path, err)
	}
	eraseWait := opts.EraseWait
	if eraseWait <= 0 {
		eraseWait = defaultEraseWait
	}
	s := &Store{db: db, path: path, now: now, ids: newIDGen(now), fatal: fatal, eraseWait: eraseWait,
		log: opts.Logger, batches: batches}
	if err := s.ensureIndexes(context.Background()); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %q: %w", path, err)
	}
	if err := s.initFormat(context.Background()); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %q: %w", path, err)
	}
	if opened, err := s.bindSealer(context.Background(), opts); err != nil {
		_ = db.Close()
		if opened != nil {
			_ = opened.Close()
		}
		return nil, fmt.Errorf("open store %q: %w", path, err)
	}
	if err := s.loadFence(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %q: %w", path, err)
	}
	if err := s.recordIdentity(context.Background()); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %q: %w", path, err)
	}
	return s, nil
}

// mustExist returns ErrNoDatabase unless path holds a Pebble database. It
// only reads: Pebble's ErrorIfNotExists alone would first create the
// folder and its lock file.
func mustExist(path string) error {
	desc, err := pebble.Peek(path, vfs.Default)
	switch {
	case errors.Is(err, fs.ErrNotExist) || (err == nil && !desc.Exists):
		return fmt.Errorf("open store %q: %w", path, ErrNoDatabase)
	case err != nil:
		return fmt.Errorf("open store %q: %w", path, err)
	}
	return nil
}

// ensureIndexes builds the indexes once for a database written before they
// existed (operators upgrade in place); sys:schema records which are there.
// A new, empty database also records that it holds nothing purged left to
// erase, so only older databases get the one-time full erase.
func (s *Store) ensureIndexes(ctx context.Context) error {
	v, err := s.get([]byte(schemaKey))
	if err == nil && string(v) == schemaVersion {
		return nil
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	if err != nil {
		found, err := s.hasRange([]byte{0}, []byte{0xff})
		if err != nil {
			return err
		}
		if !found {
			if err := s.recordErased(ctx, false); err != nil {
				return fmt.Errorf("record erase state: %w", err)
			}
			// A new database has its identity, and reflects no audit run
			// yet: a copy of it taken before its first run, put back later,
			// lacks every purge its runs recorded (spec §10).
			if err := s.initBackupState(ctx); err != nil {
				return err
			}
		}
	}
	_, err = s.RebuildDeletionIndex(ctx)
	return err
}

// Close closes the database cleanly. Closing twice is a no-op.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	err := s.db.Close()
	if err != nil {
		err = fmt.Errorf("close store: %w", err)
	}
	if s.closer != nil {
		if cerr := s.closer.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close key store: %w", cerr))
		}
	}
	return err
}

// DB exposes the Pebble handle for tooling that measures or inspects raw
// keys (benchmarks, fault checks). Application code uses the methods.
func (s *Store) DB() *pebble.DB { return s.db }

// Sync makes every earlier write durable (one synced write).
func (s *Store) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.logWrite(ctx, true); err != nil {
		return fmt.Errorf("sync store: %w", err)
	}
	return nil
}

// get returns a copy of the value at key, or ErrNotFound.
func (s *Store) get(key []byte) ([]byte, error) { return getFrom(s.db, key) }

// getFrom is get on any reader (a snapshot, a batch).
func getFrom(r pebble.Reader, key []byte) ([]byte, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	out := append([]byte(nil), v...)
	return out, closer.Close()
}

func (s *Store) has(key []byte) (bool, error) { return hasKey(s.db, key) }

func hasKey(r pebble.Reader, key []byte) (bool, error) {
	_, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", key, err)
	}
	return true, closer.Close()
}

// hasRange reports whether any key lies in [lower, upper).
func (s *Store) hasRange(lower, upper []byte) (bool, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return false, fmt.Errorf("open iterator: %w", err)
	}
	found := it.First()
	if err := it.Close(); err != nil {
		return false, fmt.Errorf("read %s: %w", lower, err)
	}
	return found, nil
}

// UserWrites is the number of thread and message writes committed since
// Open. The retention runner watches it to slow down while they compete
// with its purge; its own writes (purges, markers, stamps) are not counted.
func (s *Store) UserWrites() uint64 { return s.userWrites.Load() }

// Check reports whether the store can still commit: open, no fatal
// storage error, and a write through Pebble's commit pipeline (an empty
// log record, not synced) goes through. /healthz answers with it.
func (s *Store) Check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return ErrClosed
	}
	if s.fatal.failed.Load() {
		return ErrStorageFailed
	}
	if err := s.logWrite(ctx, false); err != nil {
		return fmt.Errorf("%w: commit probe: %w", ErrStorageFailed, err)
	}
	return nil
}

// Fatal stops the process over a storage failure found outside Pebble's
// own reporting: a panic raised inside Pebble and caught by a caller's
// recover (see IsStoragePanic). It does not return.
func (s *Store) Fatal(detail string) { s.fatal.stop(detail) }

// IsStoragePanic reports whether a panic's stack (debug.Stack() taken in
// the deferred recover) runs through Pebble. Such a panic may leave
// Pebble's locks held: it must stop the process, never be recovered.
func IsStoragePanic(stack []byte) bool {
	return bytes.Contains(stack, []byte("github.com/cockroachdb/pebble"))
}

// fatalHandler stops the process on a fatal storage error (Options.Fatal).
type fatalHandler struct {
	fn     func(detail string)
	log    *slog.Logger
	failed atomic.Bool
}

func (f *fatalHandler) stop(detail string) {
	f.failed.Store(true)
	if f.fn != nil {
		f.fn(detail)
		// Options.Fatal must not return; Pebble's caller cannot go on.
		panic("pebble: " + detail)
	}
	pebbledir.Stop(f.log, detail)
}

// Path is the database folder.
func (s *Store) Path() string { return s.path }
