package attachments

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/progressdb/progressdb/server/pkg/durable"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A file:// store on a replicated shard (docs/replication-design.md
// §14): every replica keeps its own blob folder, and the bytes travel
// through the group's log. The leader streams an upload (sealed as
// stored) into chunks, each proposed as a command's effect that every
// replica, the leader included, writes into a temporary file of its own
// folder; the attachment's record carries the effect that moves the
// file into place, so every replica has the blob before its record, and
// the upload is acknowledged once that command applied on the leader:
// a quorum then has every chunk in its log, fsynced. Deletions (purges,
// orphans, an upload refused half way) are effects too, so every
// replica's folder loses the blob. Effects are applied idempotently: a
// replica killed between an effect and its batch makes it again.

// ChunkSize is the most upload bytes one command carries.
const ChunkSize = 1 << 20

// Blob effect operations.
const (
	opChunk  byte = 1 // write data at an offset of a temporary file
	opCommit byte = 2 // move a complete temporary file into its blob's place
	opDelete byte = 3 // delete a blob or an upload's leftover
)

// ErrEffect: a blob effect that does not decode or names what no blob
// of this store can be.
var ErrEffect = errors.New("malformed attachment blob effect")

// blobEffect is one step of a replicated blob folder.
type blobEffect struct {
	op   byte
	name string // the blob, or the temporary file being written
	// off: a chunk's offset; the complete file's size for a commit.
	off  int64
	to   string // a commit's blob name
	data []byte // a chunk's bytes
}

func (e blobEffect) encode() []byte {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64+len(e.name)+len(e.to)+len(e.data))
	b = append(b, e.op)
	b = append(binary.AppendUvarint(b, uint64(len(e.name))), e.name...)
	b = binary.AppendUvarint(b, uint64(e.off))
	b = append(binary.AppendUvarint(b, uint64(len(e.to))), e.to...)
	return append(b, e.data...)
}

func decodeEffect(p []byte) (blobEffect, error) {
	if len(p) == 0 {
		return blobEffect{}, fmt.Errorf("%w: empty", ErrEffect)
	}
	e := blobEffect{op: p[0]}
	p = p[1:]
	str := func() (string, bool) {
		n, w := binary.Uvarint(p)
		if w <= 0 || n > uint64(len(p)-w) {
			return "", false
		}
		s := string(p[w : w+int(n)])
		p = p[w+int(n):]
		return s, true
	}
	var ok bool
	if e.name, ok = str(); !ok {
		return blobEffect{}, fmt.Errorf("%w: name", ErrEffect)
	}
	off, w := binary.Uvarint(p)
	if w <= 0 || off > 1<<62 {
		return blobEffect{}, fmt.Errorf("%w: offset", ErrEffect)
	}
	e.off, p = int64(off), p[w:]
	if e.to, ok = str(); !ok {
		return blobEffect{}, fmt.Errorf("%w: target", ErrEffect)
	}
	e.data = p
	if err := e.check(); err != nil {
		return blobEffect{}, err
	}
	return e, nil
}

// check refuses an effect naming anything but an attachment's blob or
// its temporary file: a path never leaves the folder.
func (e blobEffect) check() error {
	if e.op == opSweep {
		if e.name != "" || e.to != "" {
			return fmt.Errorf("%w: a sweep names %q", ErrEffect, e.name+e.to)
		}
		_, err := decodeSweep(e.data)
		return err
	}
	tid, mid, aid, leftover, ok := ObjectOf(e.name)
	switch {
	case !ok:
		return fmt.Errorf("%w: name %q", ErrEffect, e.name)
	case e.op == opChunk && !leftover, e.op == opCommit && (!leftover || e.to != store.BlobName(tid, mid, aid)):
		return fmt.Errorf("%w: %q is not a temporary file of %q", ErrEffect, e.name, e.to)
	case e.op != opChunk && e.op != opCommit && e.op != opDelete:
		return fmt.Errorf("%w: operation %d", ErrEffect, e.op)
	}
	return nil
}

// replicating reports whether uploads to st go through its group's log:
// a file:// store of a replicated store. A remote store is shared by the
// replicas already, and only its records travel.
func (b *Blobs) replicating(st *store.Store) bool { return b.dir != "" && st.Replicated() }

// tempName is a new temporary file of blob name, in fileblob's leftover
// form (<aid>.<hex>.tmp), which the orphan sweep recognises.
func tempName(name string) string {
	var id [8]byte
	_, _ = rand.Read(id[:])
	return name + "." + hex.EncodeToString(id[:]) + ".tmp"
}

// chunker proposes what is written to it in chunks of ChunkSize.
type chunker struct {
	ctx  context.Context
	st   *store.Store
	name string
	off  int64
	buf  []byte
}

func (c *chunker) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		m := min(len(p), ChunkSize-len(c.buf))
		c.buf, p = append(c.buf, p[:m]...), p[m:]
		if len(c.buf) == ChunkSize {
			if err := c.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// flush proposes the buffered bytes; it returns once this replica wrote
// them, which means a quorum has them in its log.
func (c *chunker) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	e := blobEffect{op: opChunk, name: c.name, off: c.off, data: c.buf}
	if err := c.st.ProposeEffect(c.ctx, store.EffectBlobs, e.encode()); err != nil {
		return fmt.Errorf("%w: replicate blob bytes: %w", ErrUnavailable, err)
	}
	c.off += int64(len(c.buf))
	c.buf = c.buf[:0]
	return nil
}

// deleteReplicated deletes name on every replica of st, through its log.
func (b *Blobs) deleteReplicated(ctx context.Context, st *store.Store, name string) error {
	if err := b.waitKept(ctx, name); err != nil {
		return err
	}
	if err := st.ProposeEffect(ctx, store.EffectBlobs, blobEffect{op: opDelete, name: name}.encode()); err != nil {
		return fmt.Errorf("delete blob %s on every replica: %w", name, err)
	}
	return nil
}

// Of is b as the blob store of st's retention runs: on a replicated
// store with a file:// folder a deletion reaches every replica's folder
// through the log; otherwise b itself.
func (b *Blobs) Of(st *store.Store) *ShardBlobs { return &ShardBlobs{Blobs: b, st: st} }

// ShardBlobs is a shard's blob store with its store (Of).
type ShardBlobs struct {
	*Blobs
	st *store.Store
}

// Delete deletes blob name, on every replica when the store replicates.
func (s *ShardBlobs) Delete(ctx context.Context, name string) error {
	if s.replicating(s.st) {
		return s.deleteReplicated(ctx, s.st, name)
	}
	return s.Blobs.Delete(ctx, name)
}

// ReplicaEffects applies the blob effects of a replicated shard's
// commands to the blob folder dir of this replica. Each is idempotent:
// a chunk is written at its offset (the same bytes again when re-applied)
// and synced, a commit of a blob already in place and a deletion of what
// is gone do nothing. A chunk that would leave a hole (its temporary
// file lacks the bytes before it: this replica was restored from a
// snapshot while the upload went on) is not written, and the commit of
// an incomplete file moves nothing: both are logged, and the blob is
// missing on this replica alone. A sweep of leftovers (leftovers.go)
// is started in the background unless self, this replica's ID (nil:
// none), proposed it.
func ReplicaEffects(dir string, self func() uint64, logger *slog.Logger) store.Effects {
	return replicaEffects(dir, self, logger, &sweeper{dir: dir, logger: logger})
}

func replicaEffects(dir string, self func() uint64, logger *slog.Logger, sw *sweeper) store.Effects {
	return func(ctx context.Context, effect []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		e, err := decodeEffect(effect)
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.FromSlash(e.name))
		switch e.op {
		case opChunk:
			return writeChunk(dir, path, e, logger)
		case opCommit:
			return commitBlob(dir, path, e, logger)
		case opSweep:
			s, _ := decodeSweep(e.data) // checked by decodeEffect
			if self == nil || self() != s.proposer {
				sw.ask(s)
			}
			return nil
		default:
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("delete blob %s: %w", e.name, err)
			}
			if err := durable.SyncDir(filepath.Dir(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("delete blob %s: %w", e.name, err)
			}
			return nil
		}
	}
}

// writeChunk writes a chunk into its temporary file, synced; nothing
// when the blob is in place already (a chunk sent again, resend.go).
func writeChunk(dir, path string, e blobEffect, logger *slog.Logger) error {
	tid, mid, aid, _, _ := ObjectOf(e.name) // checked by decodeEffect
	if _, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(store.BlobName(tid, mid, aid)))); err == nil {
		return nil
	}
	if e.off == 0 {
		if err := mkdirs(dir, filepath.Dir(path)); err != nil {
			return fmt.Errorf("blob %s: %w", e.name, err)
		}
	}
	flags := os.O_WRONLY
	if e.off == 0 {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if errors.Is(err, fs.ErrNotExist) && e.off > 0 {
		logger.Warn("attachment_blob_incomplete", "blob", e.name, "offset", e.off)
		return nil
	}
	if err != nil {
		return fmt.Errorf("blob %s: %w", e.name, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("blob %s: %w", e.name, err)
	}
	if e.off > info.Size() {
		logger.Warn("attachment_blob_incomplete", "blob", e.name, "offset", e.off, "size", info.Size())
		return nil
	}
	if _, err := f.WriteAt(e.data, e.off); err != nil {
		return fmt.Errorf("blob %s: %w", e.name, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("blob %s: %w", e.name, err)
	}
	if e.off == 0 {
		return syncDirs(dir, filepath.Dir(path))
	}
	return nil
}

// commitBlob moves a complete temporary file into its blob's place.
func commitBlob(dir, path string, e blobEffect, logger *slog.Logger) error {
	final := filepath.Join(dir, filepath.FromSlash(e.to))
	if _, err := os.Lstat(final); err == nil {
		return nil // moved already: a re-apply
	}
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && e.off == 0:
		// An empty file: no chunk came.
		if err := mkdirs(dir, filepath.Dir(path)); err != nil {
			return fmt.Errorf("blob %s: %w", e.to, err)
		}
		if err := durable.WriteFile(path, nil, 0o600); err != nil {
			return fmt.Errorf("blob %s: %w", e.to, err)
		}
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("blob %s: %w", e.to, err)
	case err != nil || info.Size() != e.off:
		size := int64(-1)
		if info != nil {
			size = info.Size()
		}
		logger.Warn("attachment_blob_incomplete", "blob", e.to, "size", size, "want", e.off)
		return nil
	}
	if err := os.Rename(path, final); err != nil {
		return fmt.Errorf("blob %s: %w", e.to, err)
	}
	return syncDirs(dir, filepath.Dir(final))
}

// mkdirs creates the folders of a blob (0750, as fileblob's).
func mkdirs(dir, sub string) error {
	if err := os.MkdirAll(sub, 0o750); err != nil {
		return err
	}
	return syncDirs(dir, filepath.Dir(sub))
}

// syncDirs syncs sub and each folder above it up to dir.
func syncDirs(dir, sub string) error {
	for d := sub; strings.HasPrefix(d, dir) && len(d) >= len(dir); d = filepath.Dir(d) {
		if err := durable.SyncDir(d); err != nil {
			return err
		}
		if d == dir {
			break
		}
	}
	return nil
}
