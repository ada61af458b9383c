package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrExportFolder: the export folder is not one exports may be written
// into (a symbolic link, not a folder, or inside a folder that must not
// hold purged content).
var ErrExportFolder = errors.New("export folder refused")

// CheckExportFolder checks the export folder where a run opens it, not
// only at start, since it may have been replaced since: it must be a
// folder (or absent, to be created), not a symbolic link, and, once every
// link on the way is resolved, not inside any of outside (the database and
// audit folders). Errors wrap ErrExportFolder.
func CheckExportFolder(root string, outside ...string) error {
	info, err := os.Lstat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("audit: %w: %w", ErrExportFolder, err)
	case info.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("audit: %w: %s is a symbolic link", ErrExportFolder, root)
	case !info.IsDir():
		return fmt.Errorf("audit: %w: %s is not a folder (%s)", ErrExportFolder, root, fileType(info.Mode()))
	}
	real, err := resolve(root)
	if err != nil {
		return fmt.Errorf("audit: %w: %w", ErrExportFolder, err)
	}
	for _, o := range outside {
		if o == "" {
			continue
		}
		dir, err := resolve(o)
		if err != nil {
			return fmt.Errorf("audit: %w: %w", ErrExportFolder, err)
		}
		if within(real, dir) {
			return fmt.Errorf("audit: %w: %s lies inside %s", ErrExportFolder, root, o)
		}
	}
	return nil
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a file"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return m.Type().String()
}

// resolve is p's absolute path with every symbolic link resolved; the part
// that does not exist yet is kept as written.
func resolve(p string) (string, error) {
	p, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	var rest []string
	for {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(append([]string{real}, rest...)...), nil
		}
		parent := filepath.Dir(p)
		if !errors.Is(err, fs.ErrNotExist) || parent == p {
			return "", err
		}
		rest = append([]string{filepath.Base(p)}, rest...)
		p = parent
	}
}

// within reports whether path is dir or lies under it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
