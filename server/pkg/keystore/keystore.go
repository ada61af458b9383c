// Package keystore keeps the data keys of sealed content (spec §12,
// docs/sealed-content-design.md): one AES-256-GCM key per (thread, author),
// wrapped by the KEK's keeper, in a Pebble database of its own outside the
// data directory. Destroying a key makes every value it sealed unreadable;
// the key store's erase step then removes the wrapped key from its files.
//
// Key layout:
//
//	ks:format                     "2" (binding.go; "1" before identities)
//	ks:id, ks:db                  the store's identity, its database's (binding.go)
//	ks:kek                        check value wrapped by the current KEK
//	ks:rotate                     check value of the new KEK while a rotation is unfinished
//	ks:secret:index               wrapped HMAC key of the author index (random,
//	                              or a group's own: replicate.go)
//	ks:secret:receipt             wrapped receipt key
//	ks:erased                     present when nothing destroyed is left to erase
//	k:<tid>:next                  next key number of the thread
//	k:<tid>:a:<hmac hex>          the author's key number in the thread
//	k:<tid>:k:<num 10d>           hmac(32) ‖ wrapped DEK
//	a:<hmac hex>:<tid>:<num 10d>  author index
//
// Every wrapped value starts with one byte, the generation of the KEK that
// wrapped it, so that a rotation can be resumed. Authors appear only as an
// HMAC with the index key, itself wrapped: a copy of the key store without
// the KEK cannot even be searched for a name.
package keystore

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"gocloud.dev/secrets"

	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/erase"
	"github.com/progressdb/progressdb/server/pkg/pebbledir"
)

// Sentinel errors callers act on.
var (
	// ErrInsideDataPath: the key store's path is the data directory, inside
	// it, or holds it; a copy of the data folder would carry the keys.
	ErrInsideDataPath = config.ErrInsideDataPath
	// ErrWrongKEK: the KEK does not open this key store's check value.
	ErrWrongKEK = errors.New("the KEK does not open this key store")
	// ErrRotationUnfinished: a KEK rotation began and did not finish; only
	// finishing it (Open with RotateTo, then Rewrap) opens the store.
	ErrRotationUnfinished = errors.New("a KEK rotation is unfinished: run progressdb keys rotate-kek again with the same new KEK")
	// ErrNoKey: the key was never created or has been destroyed. It
	// answers KeyGone() true, which is how the data store (which does not
	// import this package) tells a destroyed key from a failure.
	ErrNoKey error = noKeyError{}
	// ErrClosed: the key store was closed.
	ErrClosed = errors.New("key store closed")
	// ErrInvalidThread: a thread ID the data store would refuse.
	ErrInvalidThread = errors.New("invalid thread id")
)

type noKeyError struct{}

func (noKeyError) Error() string { return "no such key (destroyed or never created)" }
func (noKeyError) KeyGone() bool { return true }

const (
	formatKey        = "ks:format"
	kekKey           = "ks:kek"
	rotateKey        = "ks:rotate"
	indexSecretKey   = "ks:secret:index"
	receiptSecretKey = "ks:secret:receipt"
	erasedKey        = "ks:erased"

	threadNS = "k:"
	authorNS = "a:"

	// checkPlain is what the check values wrap: opening it proves a keeper
	// is the KEK that wrapped this store's keys.
	checkPlain = "progressdb kek check"

	dirMode = 0o700
)

// DefaultCacheSize is the number of built AEADs kept in memory.
const DefaultCacheSize = 1 << 16

// Options configure Open.
type Options struct {
	// Keeper is the KEK (OpenKEK). Required.
	Keeper *secrets.Keeper
	// DataPath is the data database's directory: the key store refuses to
	// live in it, or to hold it.
	DataPath string
	// RotateTo is the new KEK of an unfinished rotation, to finish it with
	// Rewrap. Without it, a store whose rotation is unfinished does not open.
	RotateTo *secrets.Keeper
	// CacheSize bounds the AEADs kept in memory (DefaultCacheSize when 0).
	CacheSize int
	// EraseWait bounds the erase step's waits (erase.DefaultWait when 0).
	EraseWait time.Duration
	// Logger receives Pebble's errors; they are dropped when nil.
	Logger *slog.Logger
	// MustExist opens only a key store that is already there: Open creates
	// nothing and returns ErrNoKeyStore for a missing or empty folder. A
	// sealed database's key store is opened so: a fresh one would hand out
	// keys its readers never find.
	MustExist bool
	// Database, when set, is recorded in a new key store as the data
	// database it belongs to (binding.go).
	Database string
	// ReceiptKey, when set, is used instead of the store's own receipt
	// key: a cluster's shards share one (spec §11.1), kept in etcd, so
	// that a subject has one HMAC on every shard. It is never written
	// here.
	ReceiptKey []byte
	// GroupSecret, when set, is the secret of a replicated shard's group
	// (GroupSecretSize bytes, from etcd). It seals the ops that change
	// the store (Replicate), and a store it creates keys its author
	// index with a key derived from it, so that the replicas a group
	// starts with find an author's keys on each. A store made before
	// keeps its own index key (JoinGroup). The secret is never written
	// here.
	GroupSecret []byte
}

// KeyStore holds the data keys. Build one with Open; safe for concurrent use.
type KeyStore struct {
	db        *pebble.DB
	path      string
	eraseWait time.Duration

	// keepers by the generation byte of the values they wrapped: the
	// current KEK, and during a rotation the new one at gen+1. genMu
	// guards them, gen and rotating.
	genMu   sync.RWMutex
	keepers map[byte]*secrets.Keeper
	gen     byte
	// rotating: ks:rotate is present.
	rotating bool

	indexKey, receiptKey []byte
	// macs pools HMACs keyed with indexKey: one is asked for on every
	// sealed write, and building one costs more than using it.
	macs sync.Pool

	cache   *cache
	stripes [256]sync.Mutex

	// ops seals a replicated store's ops (Options.GroupSecret,
	// JoinGroup); nil when the store is not a replica's. repl is its
	// Proposer once Replicate was called; creating orders a thread's
	// key creations on the leader (replicate.go).
	ops      atomic.Pointer[groupSeal]
	repl     atomic.Pointer[Proposer]
	creating [64]sync.Mutex
	// The background erase after an applied destroy (eraseSoon):
	// eraseKick holds one waiting start, bg the goroutines, which Close
	// ends through bgCtx.
	eraseKick chan struct{}
	bg        sync.WaitGroup
	bgCtx     context.Context
	bgCancel  context.CancelFunc
	logger    *slog.Logger

	// mu orders destroys against the end of an erase (erase.go); eraseMu
	// lets one erase run at a time.
	eraseMu  sync.Mutex
	mu       sync.Mutex
	spans    []erase.Span
	destroys uint64
	owedFull bool

	closeOnce sync.Once
	closed    chan struct{}

	// afterRewrapBatch is the tests' view of a rotation's batch boundary.
	afterRewrapBatch func()

	// bindMu guards id and database (binding.go).
	bindMu       sync.RWMutex
	id, database string
}

// Open opens (creating if needed) the key store at path.
func Open(ctx context.Context, path string, opts Options) (*KeyStore, error) {
	if opts.Keeper == nil {
		return nil, fmt.Errorf("open key store: %w: no keeper", ErrInvalidKEK)
	}
	if opts.DataPath != "" {
		if err := config.CheckOutside(path, opts.DataPath); err != nil {
			return nil, err
		}
	}
	if n := len(opts.ReceiptKey); n != 0 && n != 32 {
		return nil, fmt.Errorf("open key store: receipt key of %d bytes, not 32", n)
	}
	if opts.MustExist {
		if err := checkExists(path); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(path, dirMode); err != nil {
		return nil, fmt.Errorf("open key store %q: %w", path, err)
	}
	db, err := pebbledir.Open(path, pebbledir.Options{Logger: opts.Logger, ErrorEvent: "keystore_storage_error", MustExist: opts.MustExist})
	if err != nil {
		return nil, fmt.Errorf("open key store %q: %w", path, err)
	}
	// Under Pebble's lock: a staging copy is a killed backup's, never a
	// running one's.
	if err := pebbledir.RemoveStaleCheckpoints(path); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open key store %q: remove a backup's staging copy: %w", path, err)
	}
	size := opts.CacheSize
	if size <= 0 {
		size = DefaultCacheSize
	}
	ks := &KeyStore{db: db, path: path, eraseWait: opts.EraseWait, keepers: map[byte]*secrets.Keeper{},
		cache: newCache(size), closed: make(chan struct{}), eraseKick: make(chan struct{}, 1), logger: opts.Logger}
	ks.bgCtx, ks.bgCancel = context.WithCancel(context.WithoutCancel(ctx))
	var group *groupKeys
	if len(opts.GroupSecret) > 0 {
		if group, err = deriveGroupKeys(opts.GroupSecret); err != nil {
			ks.bgCancel()
			_ = db.Close()
			return nil, fmt.Errorf("open key store %q: %w", path, err)
		}
		defer clear(group.index)
		ks.ops.Store(&group.seal)
	}
	if err := ks.load(ctx, opts, group); err != nil {
		ks.bgCancel()
		_ = db.Close()
		return nil, fmt.Errorf("open key store %q: %w", path, err)
	}
	if len(opts.ReceiptKey) > 0 {
		// A copy: Close clears it.
		clear(ks.receiptKey)
		ks.receiptKey = bytes.Clone(opts.ReceiptKey)
	}
	return ks, nil
}

// load creates a new store's secrets (its index key the group's when
// it is made for a group), or checks the KEK against an existing one's and
// unwraps its secrets.
func (ks *KeyStore) load(ctx context.Context, opts Options, group *groupKeys) error {
	format, ok, err := ks.get([]byte(formatKey))
	if err != nil {
		return err
	}
	if !ok {
		if opts.MustExist {
			return fmt.Errorf("%w (the folder holds no key store's marker)", ErrNoKeyStore)
		}
		var index []byte
		if group != nil {
			index = group.index
		}
		return ks.initialise(ctx, opts.Keeper, opts.Database, index)
	}
	// The format is checked before anything else is read.
	n, err := parseFormat(format)
	if err != nil {
		return err
	}
	if err := ks.loadBinding(n); err != nil {
		return err
	}
	check, _, err := ks.get([]byte(kekKey))
	if err != nil {
		return err
	}
	rot, rotating, err := ks.get([]byte(rotateKey))
	if err != nil {
		return err
	}
	if !opensCheck(ctx, opts.Keeper, check) {
		if rotating && opensCheck(ctx, opts.Keeper, rot) {
			return ErrRotationUnfinished
		}
		return ErrWrongKEK
	}
	ks.gen = check[0]
	ks.keepers[ks.gen] = opts.Keeper
	if rotating {
		if opts.RotateTo == nil {
			return ErrRotationUnfinished
		}
		if !opensCheck(ctx, opts.RotateTo, rot) {
			return fmt.Errorf("%w: the new KEK is not the one the rotation began with", ErrWrongKEK)
		}
		ks.rotating = true
		ks.keepers[rot[0]] = opts.RotateTo
	}
	if ks.indexKey, err = ks.unwrapAt(ctx, indexSecretKey); err != nil {
		return err
	}
	if ks.receiptKey, err = ks.unwrapAt(ctx, receiptSecretKey); err != nil {
		return err
	}
	_, erased, err := ks.get([]byte(erasedKey))
	if err != nil {
		return err
	}
	// Keys destroyed before a crash, not yet erased: their spans are not
	// known any more, so the next erase covers the whole store.
	ks.owedFull = !erased
	return nil
}

// initialise writes a new store's format, identity, binding, check value
// and secrets, synced: the index key is index when given (a group's),
// else random like the receipt key.
func (ks *KeyStore) initialise(ctx context.Context, keeper *secrets.Keeper, database string, index []byte) error {
	it, err := ks.db.NewIter(nil)
	if err != nil {
		return err
	}
	empty := !it.First()
	if err := it.Close(); err != nil {
		return err
	}
	if !empty {
		return errors.New("not a key store (keys present, no format)")
	}
	ks.gen = 1
	ks.keepers[ks.gen] = keeper
	check, err := ks.wrap(ctx, ks.gen, []byte(checkPlain))
	if err != nil {
		return err
	}
	b := ks.db.NewBatch()
	defer b.Close()
	ks.id, ks.database = newID(), database
	_ = b.Set([]byte(formatKey), []byte(strconv.Itoa(FormatBound)), nil)
	_ = b.Set([]byte(idKey), []byte(ks.id), nil)
	_ = b.Set([]byte(databaseKey), []byte(database), nil)
	_ = b.Set([]byte(kekKey), check, nil)
	for _, s := range []struct {
		key   string
		dst   *[]byte
		given []byte
	}{{indexSecretKey, &ks.indexKey, index}, {receiptSecretKey, &ks.receiptKey, nil}} {
		secret := bytes.Clone(s.given)
		if secret == nil {
			secret = make([]byte, 32)
			if _, err := rand.Read(secret); err != nil {
				return err
			}
		}
		w, err := ks.wrap(ctx, ks.gen, secret)
		if err != nil {
			return err
		}
		_ = b.Set([]byte(s.key), w, nil)
		*s.dst = secret
	}
	_ = b.Set([]byte(erasedKey), nil, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	return nil
}

// Close closes the store; cached AEADs are dropped. No other call may run
// during or after it.
func (ks *KeyStore) Close() error {
	err := ErrClosed
	ks.closeOnce.Do(func() {
		close(ks.closed)
		ks.bgCancel()
		ks.bg.Wait() // a background erase ends before the database closes
		ks.cache.clear()
		clear(ks.indexKey)
		clear(ks.receiptKey)
		err = ks.db.Close()
	})
	return err
}

func (ks *KeyStore) isClosed() bool {
	select {
	case <-ks.closed:
		return true
	default:
		return false
	}
}

// live is the check at the start of every call.
func (ks *KeyStore) live(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if ks.isClosed() {
		return ErrClosed
	}
	return nil
}

// wrap wraps plain with the keeper of gen, behind the generation byte.
func (ks *KeyStore) wrap(ctx context.Context, gen byte, plain []byte) ([]byte, error) {
	k := ks.keeper(gen)
	if k == nil {
		return nil, fmt.Errorf("wrap: no KEK of generation %d", gen)
	}
	w, err := k.Encrypt(ctx, plain)
	if err != nil {
		return nil, fmt.Errorf("wrap: %w", err)
	}
	return append([]byte{gen}, w...), nil
}

func (ks *KeyStore) keeper(gen byte) *secrets.Keeper {
	ks.genMu.RLock()
	defer ks.genMu.RUnlock()
	return ks.keepers[gen]
}

// wrapGen is the generation new keys are wrapped with: the new KEK's
// while a rotation runs, so that none is left behind by it.
func (ks *KeyStore) wrapGen() byte {
	ks.genMu.RLock()
	defer ks.genMu.RUnlock()
	if ks.rotating {
		return ks.gen + 1
	}
	return ks.gen
}

// unwrap opens a value wrap made, with the keeper of its generation.
func (ks *KeyStore) unwrap(ctx context.Context, v []byte) ([]byte, error) {
	if len(v) < 2 {
		return nil, errors.New("unwrap: value too short")
	}
	k := ks.keeper(v[0])
	if k == nil {
		return nil, fmt.Errorf("unwrap: no KEK of generation %d", v[0])
	}
	plain, err := k.Decrypt(ctx, v[1:])
	if err != nil {
		return nil, fmt.Errorf("unwrap: %w", err)
	}
	return plain, nil
}

func (ks *KeyStore) unwrapAt(ctx context.Context, key string) ([]byte, error) {
	v, ok, err := ks.get([]byte(key))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s missing", key)
	}
	return ks.unwrap(ctx, v)
}

// opensCheck reports whether keeper opens a check value.
func opensCheck(ctx context.Context, keeper *secrets.Keeper, check []byte) bool {
	if len(check) < 2 {
		return false
	}
	plain, err := keeper.Decrypt(ctx, check[1:])
	return err == nil && string(plain) == checkPlain
}

// get returns a copy of key's value.
func (ks *KeyStore) get(key []byte) ([]byte, bool, error) {
	v, closer, err := ks.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer closer.Close()
	return bytes.Clone(v), true, nil
}

// mac is the HMAC of an author with the index key: the author index and
// the (thread, author) entries are keyed by it.
func (ks *KeyStore) mac(author string) [32]byte {
	h, _ := ks.macs.Get().(hash.Hash)
	if h == nil {
		h = hmac.New(sha256.New, ks.indexKey)
	}
	h.Reset()
	h.Write([]byte(author))
	var m [32]byte
	h.Sum(m[:0])
	ks.macs.Put(h)
	return m
}

// Subject names an author in an erasure receipt: the HMAC of the author
// with the receipt key, never the author itself.
func (ks *KeyStore) Subject(author string) string { return SubjectOf(ks.receiptKey, author) }

// SubjectOf is the HMAC of an author with a receipt key, as Subject names
// it: a cluster's shards and its etcd record share one receipt key, so one
// subject has one name on every shard.
func SubjectOf(receiptKey []byte, author string) string {
	h := hmac.New(sha256.New, receiptKey)
	h.Write([]byte(author))
	return "hmac-sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Checkpoint copies the key store as it is now (every wrapped key, log
// synced first) into a new staging folder inside its own folder (on its
// file system, so tables are hard-linked, and never inside the data
// folder, whose copies must carry no key), named by name, and returns the
// folder. A backup takes it while no retention run destroys keys, reads
// its files, and removes it (RemoveCheckpoint) before a run may destroy
// any: hard links left behind would keep a destroyed key's table on disk
// after the next erase. Open removes one a killed process left.
func (ks *KeyStore) Checkpoint(ctx context.Context, name string) (string, error) {
	if err := ks.live(ctx); err != nil {
		return "", err
	}
	dir, err := pebbledir.Checkpoint(ks.db, ks.path, name)
	if err != nil {
		return "", fmt.Errorf("key store checkpoint: %w", err)
	}
	return dir, nil
}

// RemoveCheckpoint removes a staging folder made by Checkpoint.
func (ks *KeyStore) RemoveCheckpoint(dir string) error {
	if err := pebbledir.RemoveCheckpoint(ks.path, dir); err != nil {
		return fmt.Errorf("key store: %w", err)
	}
	return nil
}
