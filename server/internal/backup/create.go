package backup

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/durable"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Holder keeps retention runs from purging while a checkpoint is taken
// (retention.Runner.Hold): it waits for a run going to end, returns the
// database's audit head, and lets runs go on when release is called.
type Holder interface {
	Hold(ctx context.Context) (head audit.Head, release func(), err error)
}

// KeyStore is the key store of a database with sealed content
// (*keystore.KeyStore): a backup carries a checkpoint of it.
type KeyStore interface {
	// Checkpoint copies the key store into a new staging folder named by
	// name and returns the folder; RemoveCheckpoint removes it.
	Checkpoint(ctx context.Context, name string) (string, error)
	RemoveCheckpoint(dir string) error
}

// KeyStoreOf is the key store st seals with, as a backup carries it
// (Options.KeyStore); nil when st is plain.
func KeyStoreOf(st *store.Store) KeyStore {
	if ks, ok := st.KeySealer().(KeyStore); ok && ks != nil {
		return ks
	}
	return nil
}

// Options configure NewCreator.
type Options struct {
	Store *store.Store
	// KeyStore, when set, is backed up with the store, in the same pause
	// of retention: the wrapped keys of the backup's moment.
	KeyStore KeyStore
	// Blobs, when set, is the attachments' blob store: a backup holds a
	// file:// store's blobs and names a remote store's (blobs.go).
	Blobs *attachments.Blobs
	Hold  Holder
	// SigningKey signs the manifest (PROGRESSDB_AUDIT_SIGNING_KEY).
	SigningKey ed25519.PrivateKey
	Version    string // written into the manifest
	// Path is PROGRESSDB_BACKUP_PATH: where CreateInPath writes; "" is off.
	Path string
	// AuditPath and Keep (PROGRESSDB_AUDIT_PATH, PROGRESSDB_BACKUP_KEEP)
	// are what List reports the backups in Path against.
	AuditPath string
	Keep      time.Duration
	Logger    *slog.Logger
	Metrics   *Metrics         // unregistered metrics when nil
	Now       func() time.Time // time.Now when nil
}

// Creator makes backups of one store.
type Creator struct {
	st      *store.Store
	ks      KeyStore
	blobs   *attachments.Blobs
	hold    Holder
	key     ed25519.PrivateKey
	version string
	path    string
	audit   string
	keep    time.Duration
	log     *slog.Logger
	metrics *Metrics
	now     func() time.Time
	// afterCheckpoint, when set (tests), is called once the checkpoint
	// is taken and retention may run again, before a blob is read.
	afterCheckpoint func()
}

// NewCreator returns a Creator.
func NewCreator(o Options) (*Creator, error) {
	if o.Store == nil || o.Hold == nil {
		return nil, errors.New("backup: a creator needs a store and a holder")
	}
	c := &Creator{st: o.Store, ks: o.KeyStore, blobs: o.Blobs, hold: o.Hold, key: o.SigningKey, version: o.Version, path: o.Path,
		audit: o.AuditPath, keep: o.Keep, log: o.Logger, metrics: o.Metrics, now: o.Now}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.metrics == nil {
		c.metrics = NewMetrics(nil)
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// Path is the configured backup folder ("" when unset).
func (c *Creator) Path() string { return c.path }

// FileName is a backup's default name (spec §10), in the default format
// (.tar.zst).
func FileName(created time.Time, id string) string {
	return "progressdb-backup-" + created.UTC().Format("20060102T150405Z") + "-" + id + zstdExt
}

// FormatOf picks a backup file's format from its name: compressed for
// .tar.zst, plain for .tar; any other name is ErrFormat, so that a name
// never promises a format the file does not have (x.tar.gz, x.zst).
func FormatOf(name string) (compressed bool, err error) {
	switch {
	case strings.HasSuffix(name, zstdExt):
		return true, nil
	case strings.HasSuffix(name, ".tar"):
		return false, nil
	}
	return false, fmt.Errorf("%s: %w", name, ErrFormat)
}

// Write streams a new backup to w, zstd-compressed when compress is set.
// The store keeps serving; every write acknowledged before the call is in
// the backup.
func (c *Creator) Write(ctx context.Context, w io.Writer, compress bool) (Manifest, error) {
	return c.write(ctx, w, compress, newID(), c.now().UTC())
}

// CreateFile writes a new backup to path: under a temporary name in the
// same folder, synced, then moved to path, mode 0600. A backup cut short
// (error, kill) never stands under path. The name gives the format
// (FormatOf); a folder gets the default name. An existing file is
// replaced only when replace is set (else ErrExists, checked before the
// backup is taken and again, atomically, when it is put in place).
func (c *Creator) CreateFile(ctx context.Context, path string, replace bool) (Manifest, string, error) {
	id, created := newID(), c.now().UTC()
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		path = filepath.Join(path, FileName(created, id))
	}
	compress, err := FormatOf(path)
	if err != nil {
		return Manifest{}, path, err
	}
	if _, err := os.Lstat(path); err == nil && !replace {
		return Manifest{}, path, fmt.Errorf("%s: %w", path, ErrExists)
	}
	var m Manifest
	fill := func(f io.Writer) error {
		var err error
		m, err = c.write(ctx, f, compress, id, created)
		return err
	}
	if replace {
		err = WriteAtomic(path, fill)
	} else {
		err = WriteNew(path, fill)
	}
	return m, path, err
}

// CreateInPath writes a new backup into BACKUP_PATH under its default name
// (ErrNoBackupPath when unset).
func (c *Creator) CreateInPath(ctx context.Context) (Manifest, string, error) {
	if c.path == "" {
		return Manifest{}, "", ErrNoBackupPath
	}
	if err := os.MkdirAll(c.path, 0o700); err != nil {
		return Manifest{}, "", fmt.Errorf("backup: %w", err)
	}
	return c.CreateFile(ctx, c.path, false)
}

// write takes the checkpoint and streams the archive, counting the result.
func (c *Creator) write(ctx context.Context, w io.Writer, compress bool, id string, created time.Time) (m Manifest, err error) {
	start := time.Now()
	cw := &countingWriter{w: w}
	defer func() {
		cancelled := Cancelled(err)
		c.metrics.observe(err, cancelled, time.Since(start), cw.n, c.now())
		switch {
		case cancelled:
			c.log.Warn("backup_cancelled", "backup_id", id, "bytes", cw.n, "err", err)
			return
		case err != nil:
			c.log.Error("backup_failed", "backup_id", id, "err", err)
			return
		}
		c.log.Info("backup_created", "backup_id", id, "audit_head", m.AuditHead.RunID, "threads", m.Threads,
			"messages", m.Messages, "files", len(m.Files), "bytes", cw.n, "duration_ms", time.Since(start).Milliseconds())
	}()
	dir, head, keys, kept, err := c.checkpoint(ctx, id)
	if err != nil {
		return m, err
	}
	defer kept.Done()
	defer func() {
		for _, f := range keys.files {
			_ = f.Close()
		}
	}()
	staged := true
	defer func() {
		// A staging copy left on the disk would keep purged tables alive
		// after the next erase.
		if !staged {
			return
		}
		if rerr := c.st.RemoveCheckpoint(dir); rerr != nil && err == nil {
			err = fmt.Errorf("backup: remove staging checkpoint: %w", rerr)
		}
	}()
	names, err := listFiles(dir)
	if err != nil {
		return m, err
	}
	stats, err := store.Count(ctx, dir)
	if err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	blobNames, err := c.checkpointBlobs(ctx, dir, kept)
	if err != nil {
		return m, err
	}
	// The staging folder goes before a byte is written: the archive is
	// read from the open files. A retention run may purge and erase while
	// a slow or stalled client takes the stream; the folder, under the
	// database folder, would keep the purged content there, though the
	// run reports it erased (the erase waits for a staging folder, but a
	// stream can last hours). Open but unlinked, the files are reachable
	// from no path and go when the backup ends, at the latest when
	// PROGRESSDB_BACKUP_STREAM_TIMEOUT cuts a stalled stream.
	files, err := openFiles(dir, names)
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	if err != nil {
		return m, err
	}
	staged = false
	if err := c.st.RemoveCheckpoint(dir); err != nil {
		return m, fmt.Errorf("backup: remove staging checkpoint: %w", err)
	}
	if c.afterCheckpoint != nil {
		c.afterCheckpoint()
	}
	if stats.HasHead {
		head = audit.Head(stats.Head)
	}
	m = Manifest{Format: formatV1, BackupID: id, CreatedAt: created, Version: c.version,
		PebbleFormat: stats.PebbleFormat, Threads: stats.Threads, Messages: stats.Messages,
		AuditHead: head, Erased: stats.Erased, Sealed: c.ks != nil}
	for i, name := range names {
		f, err := hashFile(files[i])
		if err != nil {
			return m, err
		}
		f.Name = dbDir + name
		m.Files = append(m.Files, f)
	}
	for i, name := range keys.names {
		f, err := hashFile(keys.files[i])
		if err != nil {
			return m, err
		}
		f.Name = keystoreDir + name
		m.Files = append(m.Files, f)
	}
	files = append(files, keys.files...)
	var blobFiles []File
	if m.Attachments, blobFiles, err = c.listBlobs(ctx, blobNames, kept); err != nil {
		return m, err
	}
	m.Files = append(m.Files, blobFiles...)
	line, err := m.encode(c.key)
	if err != nil {
		return m, fmt.Errorf("backup: manifest: %w", err)
	}
	if c.key != nil {
		m, _ = decodeManifest(line)
	}

	var out io.Writer = cw
	var zw *zstd.Encoder
	if compress {
		if zw, err = zstd.NewWriter(cw, zstd.WithEncoderConcurrency(1)); err != nil {
			return m, fmt.Errorf("backup: zstd: %w", err)
		}
		out = zw
	}
	tw := tar.NewWriter(out)
	if err := writeEntry(tw, ManifestName, int64(len(line)), created, strings.NewReader(string(line))); err != nil {
		return m, err
	}
	for i, f := range m.Files {
		if err := ctx.Err(); err != nil {
			return m, err
		}
		if i >= len(files) { // the blobs, after the checkpoints' files
			if err := c.copyBlob(ctx, tw, f, created, kept); err != nil {
				return m, err
			}
			continue
		}
		if err := copyEntry(tw, files[i], f, created); err != nil {
			return m, err
		}
	}
	if err := tw.Close(); err != nil {
		return m, fmt.Errorf("backup: write: %w", err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return m, fmt.Errorf("backup: write: %w", err)
		}
	}
	return m, nil
}

// Cancelled reports whether err ended a backup because its client went
// away (ErrCancelled from the writer) or cancelled its context (Ctrl-C, a
// request whose client left): nothing is wrong with the backups, so
// ProgressDBBackupsFailing must not fire.
func Cancelled(err error) bool {
	return errors.Is(err, ErrCancelled) || errors.Is(err, context.Canceled)
}

// keyFiles are the key store checkpoint's files, open, their folder gone.
type keyFiles struct {
	names []string
	files []*os.File
}

// checkpoint takes the checkpoint while no retention run purges, and the
// key store's in the same pause, so that the backup's keys are those of
// its data. Before runs may purge again, the blob store keeps every blob
// (kept, nil without a blob store; the caller narrows and ends it).
func (c *Creator) checkpoint(ctx context.Context, id string) (string, audit.Head, keyFiles, *attachments.Kept, error) {
	head, release, err := c.hold.Hold(ctx)
	if err != nil {
		return "", head, keyFiles{}, nil, fmt.Errorf("backup: wait for retention runs: %w", err)
	}
	defer release()
	dir, err := c.st.Checkpoint(ctx, id)
	if err != nil {
		return "", head, keyFiles{}, nil, fmt.Errorf("backup: %w", err)
	}
	keys := keyFiles{}
	if c.ks != nil {
		if keys, err = c.keyCheckpoint(ctx, id); err != nil {
			_ = c.st.RemoveCheckpoint(dir)
			return "", head, keyFiles{}, nil, err
		}
	}
	var kept *attachments.Kept
	if c.blobs != nil {
		kept = c.blobs.Keep()
	}
	return dir, head, keys, kept, nil
}

// keyCheckpoint checkpoints the key store and opens its files, then
// removes the staging folder, all before retention may run again: no run
// destroys a key while a hard link of its table stands under a name (the
// key store's erase would leave that copy behind). The key store is
// small; this costs milliseconds.
func (c *Creator) keyCheckpoint(ctx context.Context, id string) (keys keyFiles, err error) {
	dir, err := c.ks.Checkpoint(ctx, id)
	if err != nil {
		return keys, fmt.Errorf("backup: %w", err)
	}
	defer func() {
		if rerr := c.ks.RemoveCheckpoint(dir); rerr != nil && err == nil {
			err = fmt.Errorf("backup: remove the key store's staging checkpoint: %w", rerr)
		}
		if err != nil {
			for _, f := range keys.files {
				_ = f.Close()
			}
			keys = keyFiles{}
		}
	}()
	if keys.names, err = listFiles(dir); err != nil {
		return keys, err
	}
	keys.files, err = openFiles(dir, keys.names)
	return keys, err
}

// listFiles lists the checkpoint's regular files, sorted.
func listFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("backup: list checkpoint: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != "LOCK" {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// openFiles opens the named files of dir, all of them or none. The
// checkpoint holds a few files per gigabyte of data (tables of up to
// 64 MiB or more, the log, the MANIFEST), and Go raises the limit on
// open files to the hard limit at start.
func openFiles(dir string, names []string) ([]*os.File, error) {
	files := make([]*os.File, 0, len(names))
	for _, name := range names {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			for _, f := range files {
				_ = f.Close()
			}
			return nil, fmt.Errorf("backup: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}

// hashFile hashes f from its start.
func hashFile(f *os.File) (File, error) {
	h := sha256.New()
	n, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return File{}, fmt.Errorf("backup: read %s: %w", f.Name(), err)
	}
	return File{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// copyEntry writes one checkpoint file into the archive and checks that
// what it wrote is what the manifest hashed.
func copyEntry(tw *tar.Writer, f *os.File, want File, mod time.Time) error {
	h := sha256.New()
	if err := writeEntry(tw, want.Name, want.Size, mod, io.TeeReader(io.NewSectionReader(f, 0, want.Size), h)); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want.SHA256 {
		return fmt.Errorf("backup: %s changed while it was archived", want.Name)
	}
	return nil
}

func writeEntry(tw *tar.Writer, name string, size int64, mod time.Time, r io.Reader) error {
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o600, ModTime: mod.Truncate(time.Second),
		Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("backup: write %s: %w", name, err)
	}
	n, err := io.Copy(tw, r)
	if err != nil {
		return fmt.Errorf("backup: write %s: %w", name, err)
	}
	if n != size {
		return fmt.Errorf("backup: %s is %d bytes, %d expected", name, n, size)
	}
	return nil
}

// WriteAtomic writes path through fill (a backup made here, or one
// received from elsewhere): into a temporary file beside it (0600),
// synced, renamed over path, folder synced. On failure the temporary file
// is removed; a killed process leaves only it, never a partial file under
// path.
func WriteAtomic(path string, fill func(io.Writer) error) error {
	return writeAtomic(path, true, fill)
}

// WriteNew is WriteAtomic that never replaces a file: when path exists
// once the backup is complete it fails with ErrExists and removes what it
// wrote. The file is put in place with a hard link, which fails when the
// name is taken, so a file made meanwhile is not lost either.
func WriteNew(path string, fill func(io.Writer) error) error {
	return writeAtomic(path, false, fill)
}

// writeAtomic buffers fill's writes (an archive is written in small
// pieces) and puts the file in place through durable.
func writeAtomic(path string, replace bool, fill func(io.Writer) error) error {
	var fillErr error
	buffered := func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		if fillErr = fill(bw); fillErr != nil {
			return fillErr
		}
		return bw.Flush()
	}
	var err error
	if replace {
		err = durable.Write(path, 0o600, buffered)
	} else {
		err = durable.WriteNew(path, 0o600, buffered)
	}
	switch {
	case err == nil || err == fillErr: // fill's own error, as it said it
		return err
	case !replace && errors.Is(err, fs.ErrExist):
		return ErrExists
	}
	return fmt.Errorf("backup: %s: %w", path, err)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// newID returns 12 lowercase hex characters, like a run ID.
func newID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
