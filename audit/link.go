package audit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Files chain to each other as lines do: each header's prev_file is the
// hash of the previous sealed file's last line (its footer), so deleting,
// reordering or editing the footer of any file but the newest breaks the
// link the next file holds.

// tailWindow is how many of the newest sealed files Create looks at to find
// the one it follows. Names sort by start time, which may disagree with run
// order only when clocks disagree (hosts sharing the folder, a clock set
// back), so the true predecessor is among the newest few names.
const tailWindow = 16

// link is what the chain between files needs of one file.
type link struct {
	path     string
	start    time.Time // header started_at; from the name when the header is unreadable
	runID    string
	header   *Header // nil when the first line is not a valid header
	lastHash string  // hex SHA-256 of the last complete line; "" when there is none
	lastLine int     // number of the last line, when the verifier read the file whole; else 0
	footer   *Footer // the last line, when it is a footer
}

// prevFile is the header's prev_file, or nil (legacy file or no header).
func (l *link) prevFile() *string {
	if l.header == nil {
		return nil
	}
	return l.header.PrevFile
}

// before orders links by start time, then path.
func (l *link) before(o *link) bool {
	if !l.start.Equal(o.start) {
		return l.start.Before(o.start)
	}
	return l.path < o.path
}

// readLink reads the first and last lines of an audit file. Damage is not
// an error here: the verifier reports it file by file.
func readLink(path string) (link, error) {
	l := link{path: path}
	l.start, l.runID, _ = parseName(filepath.Base(path))
	f, err := openRegular(path, os.O_RDONLY)
	if err != nil {
		return l, err
	}
	defer f.Close()
	lines := lineReader{br: bufio.NewReaderSize(f, 4<<10)}
	raw, newline, tooLong, err := lines.next()
	if err != nil && !errors.Is(err, io.EOF) {
		return l, fmt.Errorf("read %s: %w", path, err)
	}
	if err == nil && newline && !tooLong {
		if rec, reason := parseLine(raw); reason == "" && rec.Header != nil && checkFields(&rec) == "" {
			l.header, l.runID, l.start = rec.Header, rec.RunID, rec.Header.StartedAt
		}
	}
	info, err := f.Stat()
	if err != nil {
		return l, fmt.Errorf("read %s: %w", path, err)
	}
	last, err := lastLine(f, info.Size())
	if err != nil {
		return l, fmt.Errorf("read %s: %w", path, err)
	}
	if last != nil {
		l.lastHash = lineHash(last)
		if rec, reason := parseLine(last); reason == "" && rec.Footer != nil {
			l.footer = rec.Footer
		}
	}
	return l, nil
}

// stampOf returns the start second in a run's file name.
func stampOf(name string) string {
	rest := strings.TrimPrefix(name, filePrefix)
	return rest[:min(len(rest), len(stampLayout))]
}

// parseName splits retention-<YYYYMMDDTHHMMSSZ>-<run_id>.jsonl[suffix] into
// its start time and run ID.
func parseName(name string) (time.Time, string, bool) {
	if !strings.HasPrefix(name, filePrefix) {
		return time.Time{}, "", false
	}
	base := strings.TrimPrefix(name, filePrefix)
	i := strings.Index(base, extSealed)
	if i < 0 || len(base) < len(stampLayout)+1 || base[len(stampLayout)] != '-' {
		return time.Time{}, "", false
	}
	start, err := time.Parse(stampLayout, base[:len(stampLayout)])
	if err != nil {
		return time.Time{}, "", false
	}
	id := base[len(stampLayout)+1 : i]
	return start, id, validRunID(id)
}

// previousFile returns the hash of the last line of the sealed file a new
// run follows: among the newest sealed files, the newest (by start time)
// that no other file follows already. "" when root holds no sealed file.
// The caller must hold the retention lease, so that no other run chains to
// the same file meanwhile. A sealed file that cannot be read is an error:
// the new file could not name its predecessor.
func previousFile(root string) (string, error) {
	tail, err := tailLink(root)
	if err != nil || tail == nil {
		return "", err
	}
	return tail.lastHash, nil
}

// ParseName returns the start time (to the second) and run ID that an audit
// file's name holds; ok is false for other names.
func ParseName(path string) (start time.Time, runID string, ok bool) {
	return parseName(filepath.Base(path))
}

// InProgress lists the .inprogress files of the newest month folders,
// oldest month first: the live run's, or ones a crash left for
// SealAbandoned. It lists the folders the writer's window spans (back to
// the tailWindow-th newest sealed file): a crashed run's file is sealed by
// the next start or run, before any later file is written, so it lies
// among the newest; a file further back (its seal failing for as long)
// is for audit verify to report. Its cost follows the newest folders, not
// the trail's age. A folder that cannot be listed is reported and the
// others are still listed.
func InProgress(root string) ([]string, error) {
	months, err := monthDirs(root)
	if err != nil {
		return nil, err
	}
	var out []string
	var errs []error
	sealed := 0
	for i := len(months) - 1; i >= 0 && sealed < tailWindow; i-- {
		dir := filepath.Join(root, months[i])
		entries, err := os.ReadDir(dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("audit: list %s: %w", dir, err))
			continue
		}
		var found []string
		for _, e := range entries {
			switch {
			case !e.Type().IsRegular():
			case isAuditName(e.Name(), extInProgress):
				found = append(found, filepath.Join(dir, e.Name()))
			case isSealedName(e.Name()):
				sealed++
			}
		}
		out = append(found, out...)
	}
	return out, errors.Join(errs...)
}
