package audit

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/progressdb/progressdb/server/pkg/durable"
)

// A replica that catches up by snapshot gets its leader's shard trail
// with the database (docs/replication-design.md §7): the trail as it
// stood at the snapshot's applied index, sealed files and the lines of
// the files in progress, so that the commands after that index continue
// it exactly as on the other replicas.

// TrailCopy is a trail's files as they stood when CopyTrail took it.
// Close releases it.
type TrailCopy struct {
	root  string
	files []copiedFile
}

// copiedFile is one run's file of a TrailCopy.
type copiedFile struct {
	name string // month/file, slash-separated
	size int64
	// f is an in-progress file, opened when the copy was taken: a later
	// seal renames it, and only its first size bytes are copied. A sealed
	// file never changes, and is opened when it is written.
	f *os.File
}

// ErrTrailStream reports a trail stream that is not one TrailCopy.Write
// wrote: an entry that is no run's file, or one cut short.
var ErrTrailStream = errors.New("not an audit trail stream")

// CopyTrail takes the trail at root as it stands (no trail: an empty
// copy): each run's file, sealed or in progress, at its size now. The
// caller keeps the trail from changing meanwhile (a replica holds its
// group's apply); afterwards lines may be appended and files sealed, and
// Write still writes the trail as it was.
func CopyTrail(root string) (*TrailCopy, error) {
	return copyTrailFiles(root, func(name string) bool {
		return isAuditName(name, extSealed) || isAuditName(name, extInProgress)
	})
}

// CopySealedTrail is CopyTrail of the sealed files alone: a shard's trail
// as a move hands it on, its runs held, where a file in progress can only
// be one a crash left, which the trail's next run here seals.
func CopySealedTrail(root string) (*TrailCopy, error) {
	return copyTrailFiles(root, func(name string) bool { return isAuditName(name, extSealed) })
}

func copyTrailFiles(root string, match func(name string) bool) (c *TrailCopy, err error) {
	c = &TrailCopy{root: root}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	paths, err := monthFiles(root, match)
	if err != nil {
		return c, err
	}
	for _, p := range paths {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return c, fmt.Errorf("audit: %w", err)
		}
		cf := copiedFile{name: filepath.ToSlash(rel)}
		if strings.HasSuffix(p, suffixInProgress) {
			if cf.f, err = openRegular(p, os.O_RDONLY); err != nil {
				return c, fmt.Errorf("audit: copy %s: %w", p, err)
			}
		}
		info, err := os.Lstat(p)
		if cf.f != nil {
			info, err = cf.f.Stat()
		}
		if err != nil {
			_ = closeFile(cf.f)
			return c, fmt.Errorf("audit: copy %s: %w", p, err)
		}
		cf.size = info.Size()
		c.files = append(c.files, cf)
	}
	return c, nil
}

func closeFile(f *os.File) error {
	if f == nil {
		return nil
	}
	return f.Close()
}

// Files is the number of files in the copy.
func (c *TrailCopy) Files() int { return len(c.files) }

// Write writes the copy to w as a tar stream, which ReadTrail unpacks.
func (c *TrailCopy) Write(ctx context.Context, w io.Writer) error {
	tw := tar.NewWriter(w)
	for _, cf := range c.files {
		if err := ctx.Err(); err != nil {
			return err
		}
		f := cf.f
		if f == nil {
			var err error
			if f, err = openRegular(filepath.Join(c.root, filepath.FromSlash(cf.name)), os.O_RDONLY); err != nil {
				return fmt.Errorf("audit: copy %s: %w", cf.name, err)
			}
			defer f.Close()
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: cf.name, Size: cf.size, Mode: int64(fileMode),
			ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("audit: copy %s: %w", cf.name, err)
		}
		if _, err := io.Copy(tw, io.NewSectionReader(f, 0, cf.size)); err != nil {
			return fmt.Errorf("audit: copy %s: %w", cf.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("audit: copy: %w", err)
	}
	return nil
}

// Close releases the files the copy holds open.
func (c *TrailCopy) Close() error {
	var errs []error
	for _, cf := range c.files {
		errs = append(errs, closeFile(cf.f))
	}
	c.files = nil
	return errors.Join(errs...)
}

// ReadTrail unpacks a trail that TrailCopy.Write wrote from r into dir,
// which must not exist (it is made, 0750): every run's file under its
// month folder (0640), synced, and the folders synced. A stream holding
// anything but runs' files is refused (ErrTrailStream); on any error
// the caller removes dir.
func ReadTrail(ctx context.Context, r io.Reader, dir string) error {
	if err := os.Mkdir(dir, dirMode); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if err := os.Chmod(dir, dirMode); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	months := map[string]bool{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("audit: %w: %w", ErrTrailStream, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		month, name := path.Split(hdr.Name)
		month = strings.TrimSuffix(month, "/")
		if hdr.Typeflag != tar.TypeReg || !isMonthDir(month) || strings.ContainsAny(name, `/\`) ||
			!isAuditName(name, extSealed) && !isAuditName(name, extInProgress) {
			return fmt.Errorf("audit: %w: entry %q", ErrTrailStream, hdr.Name)
		}
		if !months[month] {
			if err := os.Mkdir(filepath.Join(dir, month), dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("audit: %w", err)
			}
			if err := os.Chmod(filepath.Join(dir, month), dirMode); err != nil {
				return fmt.Errorf("audit: %w", err)
			}
			months[month] = true
		}
		if err := readTrailFile(tr, filepath.Join(dir, month, name), hdr.Size); err != nil {
			return err
		}
	}
	for month := range months {
		if err := durable.SyncDir(filepath.Join(dir, month)); err != nil {
			return fmt.Errorf("audit: %w", err)
		}
	}
	if err := durable.SyncDir(dir); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return durable.SyncDir(filepath.Dir(dir))
}

// readTrailFile writes the next size bytes of r into a new file at p,
// synced.
func readTrailFile(r io.Reader, p string, size int64) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	n, err := io.Copy(f, r)
	if err == nil && n != size {
		err = fmt.Errorf("%w: %s holds %d bytes of %d", ErrTrailStream, p, n, size)
	}
	if err == nil {
		err = f.Chmod(fileMode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}
