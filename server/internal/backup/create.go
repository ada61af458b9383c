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
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Holder keeps retention runs from purging while a checkpoint is taken
// (retention.Runner.Hold): it waits for a run going to end, returns the
// database's audit head, and lets runs go on when release is called.
type Holder interface {
	Hold(ctx context.Context) (head audit.Head, release func(), err error)
}

// Options configure NewCreator.
type Options struct {
	Store *store.Store
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
	hold    Holder
	key     ed25519.PrivateKey
	version string
	path    string
	audit   string
	keep    time.Duration
	log     *slog.Logger
	metrics *Metrics
	now     func() time.Time
}

// NewCreator returns a Creator.
func NewCreator(o Options) (*Creator, error) {
	if o.Store == nil || o.Hold == nil {
		return nil, errors.New("backup: a creator needs a store and a holder")
	}
	c := &Creator{st: o.Store, hold: o.Hold, key: o.SigningKey, version: o.Version, path: o.Path,
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

// FileName is a backup's default name (spec §10).
func FileName(created time.Time, id string) string {
	return "progressdb-backup-" + created.UTC().Format("20060102T150405Z") + "-" + id + ".tar"
}

// Compressed reports whether a backup named name is zstd-compressed.
func Compressed(name string) bool { return strings.HasSuffix(name, zstdExt) }

// Write streams a new backup to w, zstd-compressed when compress is set.
// The store keeps serving; every write acknowledged before the call is in
// the backup.
func (c *Creator) Write(ctx context.Context, w io.Writer, compress bool) (Manifest, error) {
	return c.write(ctx, w, compress, newID(), c.now().UTC())
}

// CreateFile writes a new backup to path: under a temporary name in the
// same folder, synced, then renamed, mode 0600. A backup cut short (error,
// kill) never stands under path. A path ending .tar.zst is compressed; a
// folder gets the default name.
func (c *Creator) CreateFile(ctx context.Context, path string) (Manifest, string, error) {
	id, created := newID(), c.now().UTC()
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		path = filepath.Join(path, FileName(created, id))
	}
	var m Manifest
	err := WriteAtomic(path, func(f io.Writer) error {
		var err error
		m, err = c.write(ctx, f, Compressed(path), id, created)
		return err
	})
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
	return c.CreateFile(ctx, c.path)
}

// write takes the checkpoint and streams the archive, counting the result.
func (c *Creator) write(ctx context.Context, w io.Writer, compress bool, id string, created time.Time) (m Manifest, err error) {
	start := time.Now()
	cw := &countingWriter{w: w}
	defer func() {
		c.metrics.observe(err, time.Since(start), cw.n, c.now())
		if err != nil {
			c.log.Error("backup_failed", "backup_id", id, "err", err)
			return
		}
		c.log.Info("backup_created", "backup_id", id, "audit_head", m.AuditHead.RunID, "threads", m.Threads,
			"messages", m.Messages, "files", len(m.Files), "bytes", cw.n, "duration_ms", time.Since(start).Milliseconds())
	}()
	dir, head, err := c.checkpoint(ctx, id)
	if err != nil {
		return m, err
	}
	defer func() {
		// A staging copy left on the disk would keep purged tables alive
		// after the next erase.
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
	if stats.HasHead {
		head = audit.Head(stats.Head)
	}
	m = Manifest{Format: formatV1, BackupID: id, CreatedAt: created, Version: c.version,
		PebbleFormat: stats.PebbleFormat, Threads: stats.Threads, Messages: stats.Messages,
		AuditHead: head, Erased: stats.Erased}
	for _, name := range names {
		f, err := hashFile(filepath.Join(dir, name))
		if err != nil {
			return m, err
		}
		f.Name = dbDir + name
		m.Files = append(m.Files, f)
	}
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
	for _, f := range m.Files {
		if err := ctx.Err(); err != nil {
			return m, err
		}
		if err := copyEntry(tw, filepath.Join(dir, strings.TrimPrefix(f.Name, dbDir)), f, created); err != nil {
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

// checkpoint takes the checkpoint while no retention run purges.
func (c *Creator) checkpoint(ctx context.Context, id string) (string, audit.Head, error) {
	head, release, err := c.hold.Hold(ctx)
	if err != nil {
		return "", head, fmt.Errorf("backup: wait for retention runs: %w", err)
	}
	defer release()
	dir, err := c.st.Checkpoint(ctx, id)
	if err != nil {
		return "", head, fmt.Errorf("backup: %w", err)
	}
	return dir, head, nil
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

func hashFile(path string) (File, error) {
	f, err := os.Open(path)
	if err != nil {
		return File{}, fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return File{}, fmt.Errorf("backup: read %s: %w", path, err)
	}
	return File{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// copyEntry writes one checkpoint file into the archive and checks that
// what it wrote is what the manifest hashed.
func copyEntry(tw *tar.Writer, path string, want File, mod time.Time) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if err := writeEntry(tw, want.Name, want.Size, mod, io.TeeReader(io.LimitReader(f, want.Size), h)); err != nil {
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
func WriteAtomic(path string, fill func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := fill(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("backup: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("backup: sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("backup: close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("backup: sync %s: %w", dir, err)
	}
	return nil
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
