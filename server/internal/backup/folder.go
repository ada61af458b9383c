package backup

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/progressdb/progressdb/server/pkg/durable"
)

// backupName matches the names FileName gives (.zst added for a stream
// received compressed): the time and the ID, which the manifest must
// repeat before a file counts as a backup of ours. "incoming" is the name
// backup create gives a streamed backup until it has read its ID: a
// process killed before the final rename leaves a whole backup under it.
var backupName = regexp.MustCompile(`^progressdb-backup-(?:[0-9]{8}T[0-9]{6}Z-([0-9a-f]{12})|incoming)\.tar(\.zst)?$`)

// tempName matches what WriteAtomic leaves when the process is killed
// while it writes a backup: a partial archive that can hold purged content
// (random hex since durable writes it, decimal before).
var tempName = regexp.MustCompile(`^\.progressdb-backup-(?:[0-9]{8}T[0-9]{6}Z-[0-9a-f]{12}|incoming)\.tar(\.zst)?\.tmp-[0-9a-f]+$`)

// Held is one backup found in a backup folder.
type Held struct {
	Path     string
	Size     int64
	ModTime  time.Time
	Manifest Manifest
}

// ReadManifest reads the manifest of the backup at path (the archive's
// first entry) without reading the rest.
func ReadManifest(path string) (Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return Manifest{}, fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	r, closeZ, err := decompress(bufio.NewReader(f))
	if err != nil {
		return Manifest{}, fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
	}
	defer closeZ()
	tr := tar.NewReader(r)
	hdr, err := tr.Next()
	if err != nil {
		return Manifest{}, fmt.Errorf("%w: %s: not a readable tar stream: %w", ErrInvalid, path, err)
	}
	if hdr.Name != ManifestName || hdr.Size > maxManifest {
		return Manifest{}, fmt.Errorf("%w: %s: first entry is %q, want %s", ErrInvalid, path, hdr.Name, ManifestName)
	}
	raw, err := io.ReadAll(io.LimitReader(tr, maxManifest))
	if err != nil {
		return Manifest{}, fmt.Errorf("%w: %s: manifest.json: %w", ErrInvalid, path, err)
	}
	m, err := decodeManifest(raw)
	if err != nil {
		return m, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Scan returns the backups in dir, oldest first: files named as FileName
// names them whose manifest carries the same backup ID. Anything else in
// the folder is not ours and is left out (skipped lists why, by path).
// A folder that does not exist holds no backups.
func Scan(dir string) (held []Held, skipped map[string]error, err error) {
	skipped = make(map[string]error)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, skipped, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("backup: %w", err)
	}
	for _, e := range entries {
		m := backupName.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		h, err := readHeld(path, m[1]) // "" for incoming
		if err != nil {
			skipped[path] = err
			continue
		}
		held = append(held, h)
	}
	slices.SortFunc(held, func(a, b Held) int {
		if c := a.Manifest.CreatedAt.Compare(b.Manifest.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Path, b.Path)
	})
	return held, skipped, nil
}

func readHeld(path, id string) (Held, error) {
	info, err := os.Lstat(path)
	if err != nil {
		return Held{}, fmt.Errorf("backup: %w", err)
	}
	m, err := ReadManifest(path)
	if err != nil {
		return Held{}, err
	}
	if id != "" && m.BackupID != id {
		return Held{}, fmt.Errorf("%w: %s: the manifest names backup %q", ErrInvalid, path, m.BackupID)
	}
	return Held{Path: path, Size: info.Size(), ModTime: info.ModTime(), Manifest: m}, nil
}

// Expired is what Expire deleted.
type Expired struct {
	Deleted []Held
	// Partial are temporary files a killed backup left, older than keep.
	Partial []string
}

// Expire deletes the backups in dir created more than keep before now,
// and the partial archives a killed backup left there that were last
// written more than keep ago: purged content lives on in this server's
// own backups for at most keep (spec §10 BACKUP_KEEP). Files that are not
// progressdb backups by name and manifest are never touched. Every
// deletion is logged; the folder is synced after them.
func Expire(dir string, keep time.Duration, now time.Time, log *slog.Logger) (Expired, error) {
	var out Expired
	if keep <= 0 {
		return out, errors.New("backup: expire needs a positive keep")
	}
	held, skipped, err := Scan(dir)
	if err != nil {
		return out, err
	}
	for path, why := range skipped {
		log.Warn("backup_file_not_recognised", "file", path, "err", why)
	}
	cutoff := now.Add(-keep)
	var errs []error
	for _, h := range held {
		if !h.Manifest.CreatedAt.Before(cutoff) {
			continue
		}
		if err := os.Remove(h.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("backup: expire: %w", err))
			continue
		}
		out.Deleted = append(out.Deleted, h)
		log.Info("backup_expired", "file", h.Path, "backup_id", h.Manifest.BackupID,
			"created_at", h.Manifest.CreatedAt, "keep", keep)
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("backup: %w", err))
	}
	for _, e := range entries {
		if !tempName.MatchString(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil || !info.ModTime().Before(cutoff) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("backup: expire: %w", err))
			continue
		}
		out.Partial = append(out.Partial, path)
		log.Info("backup_partial_removed", "file", path, "modified_at", info.ModTime().UTC(), "keep", keep)
	}
	if len(out.Deleted)+len(out.Partial) > 0 {
		if err := durable.SyncDir(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}
