package attachments

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// What the orphan sweep (server/internal/retention) needs of the blob
// store: every object in a stable order from a given name on, what each
// is, whether an upload is writing it, and the digest of its bytes.

// Object is one entry of the blob store: a blob, or (file://) the
// temporary file of an upload that has not completed.
type Object struct {
	Name    string
	Size    int64
	ModTime time.Time // when its last byte was written, as the store reports it
}

// ObjectOf says which attachment an object belongs to: a blob
// (<tid>/<mid>/<aid>) or an upload's leftover of one (fileblob's
// temporary file, <tid>/<mid>/<aid>.<hex>.tmp). ok is false for a name
// that is neither: not the product's, never taken for an orphan.
func ObjectOf(name string) (tid, mid, aid string, leftover, ok bool) {
	parts := strings.Split(name, "/")
	if len(parts) != 3 {
		return "", "", "", false, false
	}
	tid, mid, aid = parts[0], parts[1], parts[2]
	if base, ok := leftoverOf(aid); ok {
		aid, leftover = base, true
	}
	for _, id := range []string{tid, mid, aid} {
		if store.ValidateID(id) != nil {
			return "", "", "", false, false
		}
	}
	return tid, mid, aid, leftover, true
}

// leftoverOf returns the attachment ID a temporary file of fileblob was
// made for: <aid>.<hex>.tmp (attachment IDs hold no '.').
func leftoverOf(last string) (string, bool) {
	rest, ok := strings.CutSuffix(last, ".tmp")
	if !ok {
		return "", false
	}
	i := strings.IndexByte(rest, '.')
	if i <= 0 || i == len(rest)-1 || strings.IndexByte(rest[i+1:], '.') >= 0 {
		return "", false
	}
	for _, c := range rest[i+1:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", false
		}
	}
	return rest[:i], true
}

// isLeftover reports whether name is an upload's temporary file.
func isLeftover(name string) bool {
	_, _, _, leftover, ok := ObjectOf(name)
	return ok && leftover
}

// track notes an upload of blob name under way until the returned
// function is called.
func (b *Blobs) track(name string) func() {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if b.writing == nil {
		b.writing = make(map[string]int)
	}
	b.writing[name]++
	return func() {
		b.wmu.Lock()
		defer b.wmu.Unlock()
		if b.writing[name]--; b.writing[name] <= 0 {
			delete(b.writing, name)
		}
	}
}

// Writing reports whether an upload of this process is writing blob name
// (or its temporary file) and has not yet recorded it or failed. A sweep
// that asks before it looks for the record cannot take a blob whose
// record is about to be written: once Writing is false, the upload has
// ended, and its record exists or never will.
func (b *Blobs) Writing(name string) bool {
	tid, mid, aid, _, ok := ObjectOf(name)
	if ok {
		name = store.BlobName(tid, mid, aid)
	}
	b.wmu.Lock()
	defer b.wmu.Unlock()
	return b.writing[name] > 0
}

// errStopWalk ends a walk early.
var errStopWalk = errors.New("stop")

// Walk calls fn with every object after name after ("" for all) in the
// store's order, temporary files of uploads included, until fn returns
// false. The order is the same from one call to the next, so a sweep
// resumes after the last name it saw. A file:// store is walked folder by
// folder, skipping the folders wholly before after; a remote one is
// listed from after (S3's StartAfter, GCS's StartOffset; others from the
// first name).
func (b *Blobs) Walk(ctx context.Context, after string, fn func(Object) (bool, error)) error {
	bucket, err := b.open()
	if err != nil {
		return err
	}
	if b.dir != "" {
		err = b.walkDir(ctx, after, fn)
	} else {
		err = walkBucket(ctx, bucket, b.keyPrefix(), after, fn)
	}
	if errors.Is(err, errStopWalk) {
		return nil
	}
	return err
}

// walkDir walks a file:// folder in name order, component by component
// (WalkDir's order: "t/…" before "t-2/…").
func (b *Blobs) walkDir(ctx context.Context, after string, fn func(Object) (bool, error)) error {
	var from []string
	if after != "" {
		from = strings.Split(after, "/")
	}
	return filepath.WalkDir(b.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == b.dir && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("walk blobs: %w", err)
		}
		if p == b.dir {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(b.dir, p)
		if err != nil {
			return err
		}
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if d.IsDir() {
			if comparePath(parts, from[:min(len(parts), len(from))]) < 0 {
				return filepath.SkipDir
			}
			return nil
		}
		if comparePath(parts, from) <= 0 {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed since the folder was read
		}
		if err != nil {
			return fmt.Errorf("walk blobs: %w", err)
		}
		more, err := fn(Object{Name: strings.Join(parts, "/"), Size: info.Size(), ModTime: info.ModTime()})
		if err != nil {
			return err
		}
		if !more {
			return errStopWalk
		}
		return nil
	})
}

// comparePath orders names component by component.
func comparePath(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if c := strings.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return len(a) - len(b)
}

// keyPrefix is the prefix the store's URL puts before every name
// (prefix=, a cluster shard's within a node's bucket): the driver's own
// list options see whole keys.
func (b *Blobs) keyPrefix() string {
	u, err := url.Parse(b.url)
	if err != nil {
		return ""
	}
	return u.Query().Get("prefix")
}

// walkBucket lists a remote bucket (names under prefix, which the bucket
// hides) from after on, in key order.
func walkBucket(ctx context.Context, bucket *blob.Bucket, prefix, after string, fn func(Object) (bool, error)) error {
	opts := &blob.ListOptions{}
	if after != "" {
		start := prefix + after
		opts.BeforeList = func(as func(any) bool) error {
			var in *s3.ListObjectsV2Input
			if as(&in) {
				in.StartAfter = &start
			}
			return nil
		}
	}
	it := bucket.List(opts)
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list blobs: %w", err)
		}
		if obj.IsDir || obj.Key <= after {
			continue
		}
		more, err := fn(Object{Name: obj.Key, Size: obj.Size, ModTime: obj.ModTime})
		if err != nil || !more {
			return err
		}
	}
}

// Digest reads object name whole and returns its size and hex SHA-256:
// the bytes as stored (sealed ones when sealing). ErrBlobMissing when it
// is gone.
func (b *Blobs) Digest(ctx context.Context, name string) (int64, string, error) {
	bucket, err := b.open()
	if err != nil {
		return 0, "", err
	}
	r, err := bucket.NewReader(ctx, name, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return 0, "", fmt.Errorf("%w: %s", ErrBlobMissing, name)
	}
	if err != nil {
		return 0, "", fmt.Errorf("open blob %s: %w", name, err)
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, r, make([]byte, copyBuffer))
	if err != nil {
		return 0, "", fmt.Errorf("read blob %s: %w", name, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// OpenUpload is a multipart upload of an S3 store begun and neither
// completed nor aborted: what an upload killed part way leaves there
// (its parts are stored, and billed, until it is aborted).
type OpenUpload struct {
	Name      string // the object it would have made
	ID        string // the store's upload ID
	Initiated time.Time
}

// OpenUploads calls fn with the incomplete multipart uploads of an S3
// store, until fn returns false; other stores have none to list (GCS
// and Azure drop uncommitted uploads on their own, and a file:// upload
// leaves a temporary file, which Walk finds).
func (b *Blobs) OpenUploads(ctx context.Context, fn func(OpenUpload) (bool, error)) error {
	client, bucketName, err := b.s3()
	if err != nil || client == nil {
		return err
	}
	in := &s3.ListMultipartUploadsInput{Bucket: &bucketName}
	for {
		out, err := client.ListMultipartUploads(ctx, in)
		var none *s3types.NoSuchUpload
		if errors.As(err, &none) {
			return nil // how some S3 servers say there is none
		}
		if err != nil {
			return fmt.Errorf("list open uploads: %w", err)
		}
		for _, u := range out.Uploads {
			if u.Key == nil || u.UploadId == nil || u.Initiated == nil {
				continue
			}
			more, err := fn(OpenUpload{Name: *u.Key, ID: *u.UploadId, Initiated: *u.Initiated})
			if err != nil || !more {
				return err
			}
		}
		if out.IsTruncated == nil || !*out.IsTruncated || out.NextKeyMarker == nil {
			return nil
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}

// AbortUpload aborts multipart upload id of object name; one already
// gone (completed or aborted) is no error.
func (b *Blobs) AbortUpload(ctx context.Context, name, id string) error {
	client, bucketName, err := b.s3()
	if err != nil {
		return err
	}
	if client == nil {
		return fmt.Errorf("abort upload of %s: %w: not an S3 store", name, ErrUnavailable)
	}
	_, err = client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &bucketName, Key: &name, UploadId: &id})
	var missing *s3types.NoSuchUpload
	if err != nil && !errors.As(err, &missing) {
		return fmt.Errorf("abort upload of %s: %w", name, err)
	}
	return nil
}

// s3 returns the S3 client and bucket name of an s3:// store; nil for
// another store.
func (b *Blobs) s3() (*s3.Client, string, error) {
	if b.dir != "" {
		return nil, "", nil
	}
	bucket, err := b.open()
	if err != nil {
		return nil, "", err
	}
	var client *s3.Client
	if !bucket.As(&client) {
		return nil, "", nil
	}
	u, err := url.Parse(b.url)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return client, u.Host, nil
}
