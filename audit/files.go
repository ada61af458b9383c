package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// File layout: <root>/YYYY-MM/retention-<YYYYMMDDTHHMMSSZ>-<run_id>.jsonl,
// with an extra suffix while the run is in progress, and another for files
// set aside because they cannot be sealed.
const (
	extSealed        = ".jsonl"
	suffixInProgress = ".inprogress"
	extInProgress    = extSealed + suffixInProgress
	extCorrupt       = extSealed + ".corrupt"
	filePrefix       = "retention-"
	stampLayout      = "20060102T150405Z"
	monthLayout      = "2006-01"

	dirMode  fs.FileMode = 0o750
	fileMode fs.FileMode = 0o640
)

// sealedName is the final file name of the run that started at start.
func sealedName(start time.Time, runID string) string {
	return filePrefix + start.UTC().Format(stampLayout) + "-" + runID + extSealed
}

// isMonthDir reports whether name is a YYYY-MM folder name.
func isMonthDir(name string) bool {
	if len(name) != len(monthLayout) {
		return false
	}
	_, err := time.Parse(monthLayout, name)
	return err == nil
}

// isAuditName reports whether name looks like a run's file with suffix ext.
func isAuditName(name, ext string) bool {
	return strings.HasPrefix(name, filePrefix) && strings.HasSuffix(name, ext)
}

// monthDirs lists root's month folders, oldest first; none when root does
// not exist.
func monthDirs(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit: list %s: %w", root, err)
	}
	var months []string
	for _, e := range entries {
		if e.IsDir() && isMonthDir(e.Name()) {
			months = append(months, e.Name())
		}
	}
	slices.Sort(months)
	return months, nil
}

// monthFiles lists the regular files of root's month folders whose name
// match accepts, oldest month first. A folder that cannot be listed is
// reported and the others are still listed.
func monthFiles(root string, match func(name string) bool) ([]string, error) {
	months, err := monthDirs(root)
	if err != nil {
		return nil, err
	}
	var out []string
	var errs []error
	for _, month := range months {
		dir := filepath.Join(root, month)
		entries, err := os.ReadDir(dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("audit: list %s: %w", dir, err))
			continue
		}
		for _, e := range entries {
			if e.Type().IsRegular() && match(e.Name()) {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	return out, errors.Join(errs...)
}

// makeDirs creates dir and any missing parents with mode 0750, set
// explicitly so the umask cannot change it. It returns the folders it
// created, outermost first, so a caller can undo them.
func makeDirs(dir string) ([]string, error) {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		_, err := os.Stat(d)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	var created []string
	for _, d := range slices.Backward(missing) {
		if err := os.Mkdir(d, dirMode); err != nil {
			if errors.Is(err, fs.ErrExist) {
				continue // made by someone else meanwhile
			}
			return created, err
		}
		created = append(created, d)
		if err := os.Chmod(d, dirMode); err != nil {
			return created, err
		}
	}
	return created, nil
}

// removeDirs removes folders made by makeDirs, innermost first; folders
// that are no longer empty stay.
func removeDirs(created []string) {
	for _, d := range slices.Backward(created) {
		_ = os.Remove(d)
	}
}

// renameNew renames from to to, refusing to replace an existing file: a
// sealed file is never modified again.
func renameNew(from, to string) error {
	if _, err := os.Lstat(to); err == nil {
		return fmt.Errorf("rename %s: %s already exists", from, to)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.Rename(from, to)
}

// errNotRegular marks a path that is not a regular file (a FIFO, device,
// socket, folder or symbolic link): never an audit file, and opening some
// of them would block.
var errNotRegular = errors.New("not a regular file")

// openRegular opens path only if it is a regular file. The type is checked
// before opening (a symbolic link is refused, not followed), the open does
// not block (a FIFO swapped in meanwhile would otherwise hang it), and the
// opened file is checked again.
func openRegular(path string, flag int) (*os.File, error) {
	info, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s)", path, errNotRegular, info.Mode().Type())
	}
	f, err := os.OpenFile(path, flag|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	opened, err := f.Stat()
	if err == nil && (!opened.Mode().IsRegular() || !os.SameFile(info, opened)) {
		err = fmt.Errorf("%s: %w (replaced while opening)", path, errNotRegular)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}
