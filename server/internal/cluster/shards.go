package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A node's memory budget for its shards. Pebble reserves every memtable out
// of its store's block cache; the shards of a node share one cache, sized so
// that blocks keep a single store's room beside the memtables.
const (
	// nodeMemTables is what a node's shards' mutable memtables add up to.
	nodeMemTables = 64 << 20
	// minShardMemTable is Pebble's own default: smaller ones flush tiny files.
	minShardMemTable = 4 << 20
)

// ShardMemTableSize is the memtable of each of owned shards on one node: a
// single store's for one shard, smaller as a node holds more, never below
// Pebble's default.
func ShardMemTableSize(owned int) uint64 {
	if owned < 1 {
		owned = 1
	}
	return min(max(uint64(nodeMemTables/owned), minShardMemTable), store.DefaultMemTableSize)
}

// NodeCacheSize is the block cache a node's owned shards share: a single
// store's, plus two memtables per shard (one filling, one flushing), which
// Pebble reserves out of it.
func NodeCacheSize(owned int) int64 {
	return store.CacheSize + 2*int64(max(owned, 1))*int64(ShardMemTableSize(owned))
}

// Shards are the shard databases one node holds, each a complete progressdb
// store under <DB_PATH>/shards/<n>, sharing one block cache, each with its
// own attachments store (ShardAttachmentsURL).
type Shards struct {
	dbPath   string
	opts     store.Options // every shard's, cache and memtable included
	sealer   SealerFor
	blobsFor BlobsFor
	ksPath   string       // KeystorePath; never changed
	mu       sync.RWMutex // a move adds and removes shards while requests read them
	cache    *pebble.Cache
	stores   map[int]*store.Store
	blobs    map[int]*attachments.Blobs
}

// KeystorePath names the root of the shards' key stores (a sealing
// node's PROGRESSDB_KEYSTORE_PATH), an option of OpenShards: a replica's
// snapshot replaces a shard's key store folder (KeystoreDir) with its
// database folder, and what a crash left of that is finished or undone
// for both before the shard opens.
type KeystorePath string

// KeystoreDir is shard n's key store folder; "" when the node does not
// seal.
func (s *Shards) KeystoreDir(n int) string {
	if s.ksPath == "" {
		return ""
	}
	return ShardKeystorePath(s.ksPath, n)
}

// SealerFor returns shard n's store.Options.OpenSealer: each shard opens
// (or, sealing, creates) its own key store, which closes with it (spec
// §11.1). nil: the shards open plain.
type SealerFor func(n int) func(context.Context, store.SealState) (store.Sealer, io.Closer, error)

// BlobsFor opens shard n's attachments store, which closes with the
// shard. nil: the shards have none (their attachment routes answer 503).
type BlobsFor func(n int) (*attachments.Blobs, error)

// ShardError is a shard that did not open, naming it, so that the caller
// can say which folders to look at.
type ShardError struct {
	Shard int
	Err   error
}

func (e *ShardError) Error() string { return fmt.Sprintf("open shard %d: %v", e.Shard, e.Err) }
func (e *ShardError) Unwrap() error { return e.Err }

// OpenShards opens (creating when needed) the shards ns under dbPath, with
// o for each store, sealer's OpenSealer and blobs' attachments store for
// shard n; o.Cache and o.MemTableSize are set here; keys names the key
// stores' root when the node seals. A shard that does not open is a
// *ShardError.
func OpenShards(dbPath string, ns []int, o store.Options, sealer SealerFor, blobs BlobsFor, keys ...KeystorePath) (*Shards, error) {
	s := &Shards{dbPath: dbPath, cache: pebble.NewCache(NodeCacheSize(len(ns))), stores: make(map[int]*store.Store, len(ns)),
		blobs: make(map[int]*attachments.Blobs, len(ns)), sealer: sealer, blobsFor: blobs}
	for _, k := range keys {
		s.ksPath = string(k)
	}
	o.Cache, o.MemTableSize = s.cache, ShardMemTableSize(len(ns))
	s.opts = o
	for _, n := range ns {
		if _, dup := s.stores[n]; dup {
			continue
		}
		if err := s.open(n); err != nil {
			return nil, errors.Join(err, s.Close())
		}
	}
	return s, nil
}

// open opens shard n's store and attachments store and holds them; the
// caller holds mu or is the constructor.
func (s *Shards) open(n int) error {
	var b *attachments.Blobs
	if s.blobsFor != nil {
		var err error
		if b, err = s.blobsFor(n); err != nil {
			return &ShardError{Shard: n, Err: err}
		}
	}
	// A replica's snapshot install cut short leaves its folders beside
	// them: finished or undone before the store opens.
	var known []string
	if ks := s.KeystoreDir(n); ks != "" {
		known = append(known, ks)
	}
	err := replica.RecoverFolder(ShardDBPath(s.dbPath, n), known...)
	var st *store.Store
	if err == nil {
		st, err = store.Open(ShardDBPath(s.dbPath, n), s.options(n))
	}
	if err != nil {
		if b != nil {
			_ = b.Close()
		}
		return &ShardError{Shard: n, Err: err}
	}
	s.stores[n] = st
	if b != nil {
		s.blobs[n] = b
	}
	return nil
}

// options are shard n's store options: the shared ones with its sealer.
func (s *Shards) options(n int) store.Options {
	o := s.opts
	if s.sealer != nil {
		o.OpenSealer = s.sealer(n)
	}
	return o
}

// Store returns shard n's store, if this node holds it.
func (s *Shards) Store(n int) (*store.Store, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.stores[n]
	return st, ok
}

// Blobs returns shard n's attachments store, if this node holds the
// shard and the shards have one.
func (s *Shards) Blobs(n int) (*attachments.Blobs, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b, ok := s.blobs[n]
	return b, ok
}

// RetentionBlobs is b as the blob store of a retention runner over st:
// nil when b is, so that a shard without a blob store leaves its runner
// none rather than a non-nil interface holding a nil pointer. A
// replicated shard's runner deletes a file:// store's blobs on every
// replica (attachments.Blobs.Of).
func RetentionBlobs(b *attachments.Blobs, st *store.Store) retention.BlobStore {
	if b == nil {
		return nil
	}
	return b.Of(st)
}

// ErrShardHeld: the node holds the shard already.
var ErrShardHeld = errors.New("shard already held")

// Open opens shard n's folder, which a move has just filled, and holds it
// from now on, in the cache the others share.
func (s *Shards) Open(n int) (*store.Store, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.stores[n]; ok {
		return nil, fmt.Errorf("shard %d: %w", n, ErrShardHeld)
	}
	if s.cache == nil {
		return nil, fmt.Errorf("open shard %d: %w", n, store.ErrClosed)
	}
	if err := s.open(n); err != nil {
		return nil, err
	}
	return s.stores[n], nil
}

// Detach closes shard n, and its key store and attachments store with
// it, and holds it no more (its folders stay); false when it was not
// held.
func (s *Shards) Detach(n int) (bool, error) {
	s.mu.Lock()
	st, ok := s.stores[n]
	b := s.blobs[n]
	delete(s.stores, n)
	delete(s.blobs, n)
	s.mu.Unlock()
	if !ok {
		return false, nil
	}
	return true, closeShard(n, st, b)
}

// closeShard closes shard n's store and attachments store (nil: none).
func closeShard(n int, st *store.Store, b *attachments.Blobs) error {
	var errs []error
	if err := st.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close shard %d: %w", n, err))
	}
	if b != nil {
		if err := b.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close shard %d's attachments store: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// DBPath is the node's DB_PATH, under which the shards' folders lie.
func (s *Shards) DBPath() string { return s.dbPath }

// Numbers lists the shards held, in order.
func (s *Shards) Numbers() []int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Sorted(maps.Keys(s.stores))
}

// Close closes every shard and releases the cache. Closing twice does
// nothing.
func (s *Shards) Close() error {
	var errs []error
	ns := s.Numbers()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range ns {
		if err := closeShard(n, s.stores[n], s.blobs[n]); err != nil {
			errs = append(errs, err)
		}
	}
	clear(s.stores)
	clear(s.blobs)
	if s.cache != nil {
		s.cache.Unref()
		s.cache = nil
	}
	return errors.Join(errs...)
}
