package attachments

import (
	"context"
	"fmt"
	"io"
	"sync"

	"gocloud.dev/gcerrors"
)

// What a backup needs of the blob store (spec §16 "Copies",
// docs/backup.md): the blobs as stored (sealed when sealing is on: a
// backup never decrypts), their stored sizes, and a hold that keeps the
// blobs it has to copy from being deleted until it has copied them.

// Remote reports whether the store is remote (s3://, gs://, azblob://):
// a backup then lists its blobs instead of holding their bytes.
func (b *Blobs) Remote() bool { return b.dir == "" }

// Scheme is the store's URL scheme: file, s3, gs or azblob.
func (b *Blobs) Scheme() string {
	if b.dir != "" {
		return "file"
	}
	for i := 0; i < len(b.url); i++ {
		if b.url[i] == ':' {
			return b.url[:i]
		}
	}
	return b.url
}

// OpenStored opens blob name as stored and returns its stored size;
// ErrBlobMissing when it is not there.
func (b *Blobs) OpenStored(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	bucket, err := b.open()
	if err != nil {
		return nil, 0, err
	}
	r, err := bucket.NewReader(ctx, name, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, 0, fmt.Errorf("%w: %s", ErrBlobMissing, name)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("open blob %s: %w", name, err)
	}
	return r, r.Size(), nil
}

// StoredSize is blob name's stored size; ErrBlobMissing when it is not
// there, ErrUnavailable (wrapped) when the store cannot be reached.
func (b *Blobs) StoredSize(ctx context.Context, name string) (int64, error) {
	bucket, err := b.open()
	if err != nil {
		return 0, err
	}
	attrs, err := bucket.Attributes(ctx, name)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return 0, fmt.Errorf("%w: %s", ErrBlobMissing, name)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: look for blob %s: %w", ErrUnavailable, name, err)
	}
	return attrs.Size, nil
}

// keeper is the blobs kept from deletion for the backups under way.
type keeper struct {
	mu    sync.Mutex
	all   int            // holds not narrowed yet: every blob is kept
	names map[string]int // blobs kept, by how many holds
	// changed is closed, and replaced, whenever a hold lets blobs go.
	changed chan struct{}
	waiting int // deletes waiting for a hold
}

// Kept is one backup's hold on the blobs it copies.
type Kept struct {
	b     *Blobs
	mu    sync.Mutex
	all   bool
	names map[string]bool
	done  bool
}

// Keep keeps every blob from deletion until the hold is narrowed
// (Narrow) or ended (Done): a backup takes it while its checkpoint is
// taken, then narrows it to the blobs the checkpoint's records name and
// releases each once copied. Delete of a kept blob waits, so that a
// retention run purging an attachment between a checkpoint and the copy
// of its blob deletes the blob after the copy, and the backup holds what
// its manifest lists. A hold must end (Done), whatever happens.
func (b *Blobs) Keep() *Kept {
	k := &b.keep
	k.mu.Lock()
	defer k.mu.Unlock()
	k.all++
	return &Kept{b: b, all: true}
}

// Narrow keeps only names from now on.
func (h *Kept) Narrow(names []string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.all || h.done {
		return
	}
	k := &h.b.keep
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.names == nil {
		k.names = make(map[string]int)
	}
	h.names = make(map[string]bool, len(names))
	for _, n := range names {
		if !h.names[n] {
			h.names[n] = true
			k.names[n]++
		}
	}
	h.all = false
	k.all--
	k.wake()
}

// Release lets blob name go (the backup has copied it).
func (h *Kept) Release(name string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.all || !h.names[name] {
		return
	}
	delete(h.names, name)
	k := &h.b.keep
	k.mu.Lock()
	defer k.mu.Unlock()
	k.drop(name)
	k.wake()
}

// Done ends the hold; calling it again is harmless.
func (h *Kept) Done() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return
	}
	h.done = true
	k := &h.b.keep
	k.mu.Lock()
	defer k.mu.Unlock()
	if h.all {
		k.all--
	}
	for n := range h.names {
		k.drop(n)
	}
	h.all, h.names = false, nil
	k.wake()
}

func (k *keeper) drop(name string) {
	if k.names[name]--; k.names[name] <= 0 {
		delete(k.names, name)
	}
}

// wake tells the deletes waiting that holds changed. The caller holds mu.
func (k *keeper) wake() {
	if k.changed != nil {
		close(k.changed)
		k.changed = nil
	}
}

// waitKept returns once no backup keeps blob name, or with ctx's error.
func (b *Blobs) waitKept(ctx context.Context, name string) error {
	k := &b.keep
	for {
		k.mu.Lock()
		if k.all == 0 && k.names[name] == 0 {
			k.mu.Unlock()
			return nil
		}
		if k.changed == nil {
			k.changed = make(chan struct{})
		}
		ch := k.changed
		k.waiting++
		k.mu.Unlock()
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = fmt.Errorf("delete blob %s: waiting for a backup to copy it: %w", name, ctx.Err())
		}
		k.mu.Lock()
		k.waiting--
		k.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// DeletesWaiting is how many deletes wait for a backup to copy their
// blob.
func (b *Blobs) DeletesWaiting() int {
	b.keep.mu.Lock()
	defer b.keep.mu.Unlock()
	return b.keep.waiting
}
