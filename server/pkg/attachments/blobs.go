// Package attachments keeps the bytes of message attachments (spec §16,
// docs/attachments.md) in a blob store reached through gocloud.dev/blob
// (file://, s3://, gs://, azblob://): uploads streamed in, sealed in
// segments when the store seals (server/pkg/sealstream), recorded in the
// store only once their blob is complete; downloads by range; deletes.
// The metadata is the store's (store.Attachment); this package owns the
// blobs and the order of the two.
package attachments

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // azblob://
	"gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/gcsblob" // gs://
	_ "gocloud.dev/blob/s3blob"  // s3://
	"gocloud.dev/gcerrors"

	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/durable"
)

// ErrUnavailable: the blob store cannot be reached or opened (a folder
// that cannot be created, a bucket that refuses).
var ErrUnavailable = errors.New("attachments store unavailable")

// Blobs is a blob store of attachments. A file:// folder is created on
// first use, so that a server whose folder cannot be created yet (a
// volume mounted later) still starts and serves everything else.
type Blobs struct {
	url string
	dir string // the file:// folder; "" for a remote store

	mu     sync.Mutex
	bucket *blob.Bucket

	// writing counts the uploads under way per blob name, from before
	// their blob is created until their record is written or they fail:
	// the orphan sweep never takes such a blob (orphans.go).
	wmu     sync.Mutex
	writing map[string]int

	keep keeper // blobs backups still have to copy (copies.go)
}

// Open returns the blob store at rawURL (PROGRESSDB_ATTACHMENTS_URL, as
// config validated it). A remote store's driver is opened now; a folder
// when first used.
func Open(ctx context.Context, rawURL string) (*Blobs, error) {
	scheme, dir, err := config.ParseAttachmentsURL(rawURL)
	if err != nil {
		return nil, err
	}
	b := &Blobs{url: rawURL, dir: dir}
	if scheme != "file" {
		bucket, err := blob.OpenBucket(ctx, rawURL)
		if err != nil {
			return nil, fmt.Errorf("%w: open %s: %w", ErrUnavailable, scheme+"://", err)
		}
		b.bucket = bucket
	}
	return b, nil
}

// Dir is the folder of a file:// store; "" for a remote one.
func (b *Blobs) Dir() string { return b.dir }

// open returns the bucket, opening (and creating) a folder on first use.
func (b *Blobs) open() (*blob.Bucket, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bucket != nil {
		return b.bucket, nil
	}
	// 0750 like the audit folders: blobs hold content (sealed or not).
	if err := os.MkdirAll(b.dir, 0o750); err != nil {
		return nil, fmt.Errorf("%w: create folder: %w", ErrUnavailable, err)
	}
	bucket, err := fileblob.OpenBucket(b.dir, &fileblob.Options{
		// Temporary files beside their final name: an upload cut off
		// leaves nothing elsewhere, and the rename stays on one disk.
		NoTempDir:   true,
		DirFileMode: 0o750,
		// No sidecar files: what an attachment is lives in the store.
		Metadata: fileblob.MetadataDontWrite,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: open folder: %w", ErrUnavailable, err)
	}
	b.bucket = bucket
	return bucket, nil
}

// Close closes the bucket.
func (b *Blobs) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bucket == nil {
		return nil
	}
	err := b.bucket.Close()
	b.bucket = nil
	return err
}

// Delete deletes blob name; one already gone is no error, so that a
// delete interrupted and done again finishes quietly. (On a versioned
// bucket the old versions stay: only sealing makes them unreadable.) A
// blob a backup under way still has to copy is deleted once copied
// (Keep).
func (b *Blobs) Delete(ctx context.Context, name string) error {
	if err := b.waitKept(ctx, name); err != nil {
		return err
	}
	bucket, err := b.open()
	if err != nil {
		return err
	}
	if err := bucket.Delete(ctx, name); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("delete blob %s: %w", name, err)
	}
	if b.dir != "" {
		return durable.SyncDir(filepath.Dir(b.path(name)))
	}
	return nil
}

// Exists reports whether blob name exists.
func (b *Blobs) Exists(ctx context.Context, name string) (bool, error) {
	bucket, err := b.open()
	if err != nil {
		return false, err
	}
	ok, err := bucket.Exists(ctx, name)
	if err != nil {
		return false, fmt.Errorf("look for blob %s: %w", name, err)
	}
	return ok, nil
}

// BlobInfo is one blob a listing found.
type BlobInfo struct {
	Name    string // <tid>/<mid>/<aid> (store.BlobName)
	Size    int64
	ModTime time.Time
}

// List calls fn with every blob whose name starts with prefix ("" for
// all), in the store's order. Temporary files of uploads under way are
// not blobs and are not listed.
func (b *Blobs) List(ctx context.Context, prefix string, fn func(BlobInfo) error) error {
	bucket, err := b.open()
	if err != nil {
		return err
	}
	it := bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list blobs: %w", err)
		}
		if obj.IsDir || (b.dir != "" && isLeftover(obj.Key)) {
			continue
		}
		if err := fn(BlobInfo{Name: obj.Key, Size: obj.Size, ModTime: obj.ModTime}); err != nil {
			return err
		}
	}
}

// path is the file of blob name in a file:// store.
func (b *Blobs) path(name string) string {
	return filepath.Join(b.dir, filepath.FromSlash(name))
}

// syncFile makes a completed blob of a file:// store durable before it
// is recorded: fileblob renames without syncing, and a record naming a
// blob a power cut lost would answer a file that is not there.
func (b *Blobs) syncFile(name string) error {
	if b.dir == "" {
		return nil
	}
	p := b.path(name)
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("sync blob %s: %w", name, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync blob %s: %w", name, err)
	}
	// Its folder and the folders created for it (<tid>/, <tid>/<mid>/).
	for d := filepath.Dir(p); strings.HasPrefix(d, b.dir) && len(d) >= len(b.dir); d = filepath.Dir(d) {
		if err := durable.SyncDir(d); err != nil {
			return fmt.Errorf("sync blob %s: %w", name, err)
		}
		if d == b.dir {
			break
		}
	}
	return nil
}
