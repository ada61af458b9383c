package store

// Fencing (spec §11). In a cluster a shard's database must take writes only
// from the shard's current owner, and a lease alone cannot promise that: a
// paused or partitioned owner can wake up after its successor took over and
// still commit. So every write of an owner carries its fencing token (the
// epoch of its ownership lease) in its context (WithEpoch); the database
// keeps the newest token it has seen under sys:fence, raised in the very
// commit of the first batch that carries it, and refuses a batch whose
// token is older with ErrFenced. Writes without a token (a single node,
// the command line's tools) are not checked.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// ErrFenced refuses a write whose fencing token is older than the newest
// the database has seen: its writer is no longer the owner.
var ErrFenced = errors.New("fenced: a newer owner's epoch has been seen")

// fenceKey holds the newest fencing token seen, in decimal.
const fenceKey = "sys:fence"

type epochKey struct{}

// WithEpoch returns a context whose writes carry the fencing token epoch
// (positive).
func WithEpoch(ctx context.Context, epoch int64) context.Context {
	return context.WithValue(ctx, epochKey{}, epoch)
}

// EpochOf returns the fencing token ctx carries, if any.
func EpochOf(ctx context.Context) (int64, bool) {
	e, ok := ctx.Value(epochKey{}).(int64)
	return e, ok
}

// fence orders token checks against raises: a batch holds it for reading
// from its check until it is applied, and a raise holds it for writing, so
// once a newer token is applied no batch with an older one can follow.
type fence struct {
	mu     sync.RWMutex
	newest int64 // guarded by mu; 0 when no token was ever seen
}

// Epoch returns the newest fencing token the database has seen (0 when it
// has seen none).
func (s *Store) Epoch() int64 {
	s.fence.mu.RLock()
	defer s.fence.mu.RUnlock()
	return s.fence.newest
}

func (s *Store) loadFence() error {
	v, err := s.get([]byte(fenceKey))
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("%s: %w: %q", fenceKey, ErrMalformed, v)
	}
	s.fence.newest = n
	return nil
}

// admit checks the token ctx carries before b is applied. It returns
// release, to be called once b is applied or abandoned (applied says
// which); until then the fence stays held. A token newer than any seen is
// written into b, so the raise commits with the batch or not at all.
func (s *Store) admit(ctx context.Context, b *pebble.Batch) (release func(applied bool), err error) {
	e, ok := EpochOf(ctx)
	if !ok {
		return func(bool) {}, nil
	}
	f := &s.fence
	f.mu.RLock()
	if e == f.newest {
		return func(bool) { f.mu.RUnlock() }, nil
	}
	f.mu.RUnlock()

	f.mu.Lock()
	switch {
	case e < f.newest:
		newest := f.newest
		f.mu.Unlock()
		return nil, fmt.Errorf("%w: write with epoch %d, newest seen %d", ErrFenced, e, newest)
	case e == f.newest: // raised meanwhile by another batch of this owner
		return func(bool) { f.mu.Unlock() }, nil
	}
	_ = b.Set([]byte(fenceKey), strconv.AppendInt(nil, e, 10), nil)
	return func(applied bool) {
		if applied {
			f.newest = e
		}
		f.mu.Unlock()
	}, nil
}

// RaiseFence makes epoch the newest fencing token the database has seen,
// durably and with no other write: once it returns, every batch carrying
// an older token is refused, and every batch admitted before it is
// applied. A shard moved away is fenced this way before its copy is taken,
// so that no write its owner acknowledges can miss the copy. An epoch
// older than the newest seen is refused with ErrFenced.
func (s *Store) RaiseFence(ctx context.Context, epoch int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if epoch < 1 {
		return fmt.Errorf("%w: fencing token %d", ErrInvalidArgument, epoch)
	}
	// admit writes the token into the batch when it is newer.
	return s.apply(WithEpoch(ctx, epoch), write{kind: writeState, batch: s.db.NewBatch(), sync: true})
}
