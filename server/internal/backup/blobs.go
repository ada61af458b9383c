package backup

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Attachments' blobs in a backup (spec §16 "Copies"). The blobs a backup
// holds are those the checkpoint's attachment records name, taken after
// the checkpoint, as stored (sealed when sealing is on: a backup never
// decrypts). A file:// store's blobs are files of the archive under
// attachments/<thread>/<message>/<attachment>, listed in the manifest's
// files like the database's, so verify and restore check them. A remote
// store's (s3, gs, azblob) stay in it: the manifest names them with their
// stored sizes and verify checks that the store still holds them.
//
// The blob store keeps every blob from deletion while the checkpoint is
// taken and, after it, the blobs the checkpoint names until each is
// copied (attachments.Blobs.Keep): a run purging one of them meanwhile
// deletes the blob once it is copied. The backup then holds a blob whose
// purge the trail records after its audit head, which a restore's replay
// repeats, deleting the restored blob.

// attachmentsDir is the archive's folder of a file:// store's blobs.
const attachmentsDir = "attachments/"

// Attachments is what a backup holds of the attachments' blob store.
type Attachments struct {
	// Store is the blob store's scheme: "file" (the blobs are in the
	// archive, listed in the manifest's files) or a remote store's (s3,
	// gs, azblob: Blobs names them).
	Store string `json:"store"`
	// Count is how many blobs the checkpoint's records name.
	Count int64 `json:"count"`
	// Blobs are a remote store's blobs, by name, with their stored sizes.
	Blobs []Blob `json:"blobs,omitempty"`
	// Missing names the blobs the records named that the store did not
	// hold when the backup was taken (deleted outside progressdb, or
	// lost): the backup holds their records without bytes, as the
	// database did.
	Missing []string `json:"missing,omitempty"`
}

// Blob is one blob of a remote store.
type Blob struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
}

// blobName is the blob name (<tid>/<mid>/<aid>) of archive entry name
// under attachments/, with every ID valid; ok false for any other name.
func blobName(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, attachmentsDir)
	if !ok {
		return "", false
	}
	return rest, validBlobName(rest)
}

// validBlobName accepts <tid>/<mid>/<aid> with valid IDs (nothing a
// restore could write outside its folder).
func validBlobName(name string) bool {
	parts := strings.Split(name, "/")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if store.ValidateID(p) != nil || !validBase(p) {
			return false
		}
	}
	return true
}

// checkAttachments checks the manifest's attachments part.
func checkAttachments(m Manifest, blobFiles int) error {
	a := m.Attachments
	switch {
	case a == nil && blobFiles > 0:
		return fmt.Errorf("%w: manifest.json: lists attachment files, and no attachments store", ErrInvalid)
	case a == nil:
		return nil
	case a.Store == "":
		return fmt.Errorf("%w: manifest.json: attachments name no store", ErrInvalid)
	case a.Store != "file" && blobFiles > 0:
		return fmt.Errorf("%w: manifest.json: attachments of a %s:// store, whose bytes a backup never holds, listed as files", ErrInvalid, a.Store)
	case a.Store == "file" && len(a.Blobs) > 0:
		return fmt.Errorf("%w: manifest.json: attachments of a file:// store listed as remote blobs", ErrInvalid)
	case int64(blobFiles+len(a.Blobs)+len(a.Missing)) != a.Count:
		return fmt.Errorf("%w: manifest.json: attachments count %d, %d listed", ErrInvalid, a.Count, blobFiles+len(a.Blobs)+len(a.Missing))
	}
	for _, b := range a.Blobs {
		if !validBlobName(b.Name) || b.Size < 0 {
			return fmt.Errorf("%w: manifest.json: bad attachment blob %q", ErrInvalid, b.Name)
		}
	}
	for _, n := range a.Missing {
		if !validBlobName(n) {
			return fmt.Errorf("%w: manifest.json: bad missing attachment blob %q", ErrInvalid, n)
		}
	}
	return nil
}

// checkpointBlobs names the blobs of the attachment records of the
// checkpoint at dir and narrows kept to them (none without a blob store).
func (c *Creator) checkpointBlobs(ctx context.Context, dir string, kept *attachments.Kept) ([]string, error) {
	if c.blobs == nil {
		return nil, nil
	}
	var names []string
	err := store.DirAttachments(ctx, dir, func(a store.Attachment) error {
		names = append(names, a.BlobName())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	kept.Narrow(names)
	return names, nil
}

// listBlobs describes the blobs names (the checkpoint's) as stored: a
// file:// store's with their SHA-256, as archive files; a remote store's
// with their sizes. A remote blob is released once seen: nothing more of
// it is read. Nothing without a blob store.
func (c *Creator) listBlobs(ctx context.Context, names []string, kept *attachments.Kept) (*Attachments, []File, error) {
	if c.blobs == nil {
		return nil, nil, nil
	}
	a := &Attachments{Store: c.blobs.Scheme(), Count: int64(len(names))}
	var files []File
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		if c.blobs.Remote() {
			size, err := c.blobs.StoredSize(ctx, name)
			kept.Release(name)
			switch {
			case errors.Is(err, attachments.ErrBlobMissing):
				a.Missing = append(a.Missing, name)
			case err != nil:
				return nil, nil, fmt.Errorf("backup: %w", err)
			default:
				a.Blobs = append(a.Blobs, Blob{Name: name, Size: size})
			}
			continue
		}
		f, err := c.hashBlob(ctx, name)
		switch {
		case errors.Is(err, attachments.ErrBlobMissing):
			kept.Release(name)
			a.Missing = append(a.Missing, name)
		case err != nil:
			return nil, nil, err
		default:
			files = append(files, f)
		}
	}
	for _, n := range a.Missing {
		c.log.Warn("backup_attachment_blob_missing", "blob", n)
	}
	return a, files, nil
}

// hashBlob hashes blob name as stored.
func (c *Creator) hashBlob(ctx context.Context, name string) (File, error) {
	r, _, err := c.blobs.OpenStored(ctx, name)
	if err != nil {
		return File{}, err
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return File{}, fmt.Errorf("backup: read blob %s: %w", name, err)
	}
	return File{Name: attachmentsDir + name, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// copyBlob writes blob want into the archive, checks that what it wrote
// is what the manifest hashed, and lets the blob go.
func (c *Creator) copyBlob(ctx context.Context, tw *tar.Writer, want File, mod time.Time, kept *attachments.Kept) error {
	name := strings.TrimPrefix(want.Name, attachmentsDir)
	r, _, err := c.blobs.OpenStored(ctx, name)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer r.Close()
	h := sha256.New()
	if err := writeEntry(tw, want.Name, want.Size, mod, io.TeeReader(io.LimitReader(r, want.Size), h)); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want.SHA256 {
		return fmt.Errorf("backup: blob %s changed while it was archived", name)
	}
	kept.Release(name)
	return nil
}

// CheckRemoteBlobs checks, for a valid backup of a remote store, that
// the store open opens (the one PROGRESSDB_ATTACHMENTS_URL names) holds
// every blob the manifest names, at its size: each one missing is a
// problem, and a store that cannot be opened or reached is one, never a
// pass. A backup of a file:// store, or of none, is left as it is, and
// open is not called.
func CheckRemoteBlobs(ctx context.Context, rep *Report, open func(context.Context) (*attachments.Blobs, error)) {
	a := rep.Manifest.Attachments
	if a == nil || a.Store == "file" || !rep.Valid {
		return
	}
	problem := func(format string, args ...any) {
		rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...))
		rep.Valid = false
	}
	blobs, err := open(ctx)
	if err != nil {
		problem("attachments: the backup's %d blobs are in a %s:// store, which could not be opened to check them: %v", len(a.Blobs), a.Store, err)
		return
	}
	defer blobs.Close()
	switch {
	case blobs.Scheme() != a.Store:
		problem("attachments: the backup's blobs are in a %s:// store, and the attachments store configured is %s://: set PROGRESSDB_ATTACHMENTS_URL to the store the backup was taken of", a.Store, blobs.Scheme())
		return
	}
	for _, b := range a.Blobs {
		size, err := blobs.StoredSize(ctx, b.Name)
		switch {
		case errors.Is(err, attachments.ErrBlobMissing):
			problem("attachments/%s: not in the %s:// store", b.Name, a.Store)
		case err != nil:
			problem("attachments: the %s:// store cannot be reached, so the blobs were not checked: %v", a.Store, err)
			return
		case size != b.Size:
			problem("attachments/%s: %d bytes in the store, the manifest says %d", b.Name, size, b.Size)
		}
	}
}
