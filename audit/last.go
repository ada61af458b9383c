package audit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Summary describes one audit file: its header and, when sealed, its footer.
type Summary struct {
	Path   string
	RunID  string
	Header Header
	Footer *Footer // nil while in progress
	Sealed bool
}

// LastRun returns the most recent run's file under root by header start
// time (sealed or not); nil, nil when there is none. Cheap: it reads only
// the newest month folders and each candidate's first and last lines.
//
// File names sort by start time (to the second), so the newest file is the
// greatest name in the newest month folder that holds any. A file left in
// progress has a footer only if its run ended between writing the footer
// and the rename. A newest file whose header (or, when sealed, footer)
// cannot be read is reported as a *Problem rather than skipped.
func LastRun(root string) (*Summary, error) { return LastRunOf(root, "") }

// LastRunOf is LastRun over the runs of the database dbID alone (RunOf):
// the runs of other databases sharing the trail (a copy restored from it,
// its restore's replay) are passed over (spec §10.1). dbID "" takes every
// run.
func LastRunOf(root, dbID string) (*Summary, error) {
	return (&NewestRun{}).LastRunOf(root, dbID)
}

// NewestRun is LastRunOf for a caller that asks often (a server's
// status): it remembers the newest month folder's listing with the
// folder's modification time, and lists the folder again only when an
// entry was added, renamed or removed since, so that a status costs the
// same however many runs the month holds. The files themselves are read
// every time (a run in progress grows its own). The zero value is ready;
// it is safe for concurrent use.
type NewestRun struct {
	mu    sync.Mutex
	dir   string
	mod   time.Time
	names []string
}

// settledAfter is how long a folder must have been left unchanged before
// its listing is remembered: a change within the file system's timestamp
// granularity of the listing may leave its modification time as it was.
const settledAfter = 2 * time.Second

// LastRunOf is the package's LastRunOf, the newest folder's listing
// remembered.
func (c *NewestRun) LastRunOf(root, dbID string) (*Summary, error) {
	months, err := monthDirs(root)
	if err != nil {
		return nil, err
	}
	for i := len(months) - 1; i >= 0; i-- {
		dir := filepath.Join(root, months[i])
		list := runsNewestFirst
		if i == len(months)-1 {
			list = c.runs
		}
		names, err := list(dir)
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			sum, err := summarize(filepath.Join(dir, name))
			if err != nil {
				return nil, err
			}
			if RunOf(&sum.Header, dbID) {
				return sum, nil
			}
		}
	}
	return nil, nil
}

// RunOf reports whether the run with header h purged the database dbID:
// its database_id is dbID, or either is unknown (a file or a database from
// before identities). The record of a format raise is no run: it purged
// nothing, and a missed-run check or the last success must not take it
// for one.
func RunOf(h *Header, dbID string) bool {
	return h.Trigger != TriggerFormat && (dbID == "" || h.DatabaseID == "" || h.DatabaseID == dbID)
}

// runsNewestFirst returns the names of the runs' files (sealed or in
// progress) in one month folder, newest first.
func runsNewestFirst(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("audit: list %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		if e.Type().IsRegular() && (isAuditName(name, extSealed) || isAuditName(name, extInProgress)) {
			names = append(names, name)
		}
	}
	// Names sort by start time; compare them without the extension.
	slices.SortFunc(names, func(a, b string) int { return strings.Compare(runBase(b), runBase(a)) })
	return names, nil
}

// runs is runsNewestFirst, from memory while dir is unchanged.
func (c *NewestRun) runs(dir string) ([]string, error) {
	before, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("audit: list %s: %w", dir, err)
	}
	c.mu.Lock()
	if c.dir == dir && c.mod.Equal(before.ModTime()) {
		names := c.names
		c.mu.Unlock()
		return names, nil
	}
	c.mu.Unlock()
	names, err := runsNewestFirst(dir)
	if err != nil {
		return nil, err
	}
	after, err := os.Stat(dir)
	if err == nil && after.ModTime().Equal(before.ModTime()) && time.Since(after.ModTime()) > settledAfter {
		c.mu.Lock()
		c.dir, c.mod, c.names = dir, after.ModTime(), names
		c.mu.Unlock()
	}
	return names, nil
}

func runBase(name string) string {
	return strings.TrimSuffix(strings.TrimSuffix(name, extInProgress), extSealed)
}

// summarize reads the header (first line) and footer (last line) of path.
func summarize(path string) (*Summary, error) {
	f, err := openRegular(path, os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()

	lines := lineReader{br: bufio.NewReaderSize(f, 4<<10)}
	raw, newline, tooLong, err := lines.next()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("audit: read %s: %w", path, err)
	}
	first, reason := parseLine(raw)
	switch {
	case errors.Is(err, io.EOF):
		return nil, &Problem{File: path, Reason: "empty file"}
	case tooLong || !newline:
		return nil, &Problem{File: path, Line: 1, Reason: "header line is torn or too long"}
	case reason != "":
		return nil, &Problem{File: path, Line: 1, Reason: reason}
	case first.Header == nil:
		return nil, &Problem{File: path, Line: 1, Reason: "first record is " + first.Msg + ", want " + MsgHeader}
	}
	sum := &Summary{
		Path:   path,
		RunID:  first.RunID,
		Header: *first.Header,
		Sealed: strings.HasSuffix(path, extSealed),
	}

	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	raw, err = lastLine(f, info.Size())
	if err != nil {
		return nil, fmt.Errorf("audit: read %s: %w", path, err)
	}
	if raw != nil {
		if last, reason := parseLine(raw); reason == "" && last.Footer != nil {
			sum.Footer = last.Footer
		}
	}
	if sum.Sealed && sum.Footer == nil {
		return nil, &Problem{File: path, Reason: "last line is not a footer"}
	}
	return sum, nil
}

// lastLine returns the last complete line of f (size bytes long) without
// its newline, reading backwards from the end in a growing window. It
// returns nil when the file is empty or does not end with a newline (a
// torn write), and an error when the line is longer than MaxLineSize.
func lastLine(f io.ReaderAt, size int64) ([]byte, error) {
	if size == 0 {
		return nil, nil
	}
	for window := int64(4 << 10); ; window *= 2 {
		window = min(window, size, MaxLineSize+2) // the line and a newline on each side
		buf := make([]byte, window)
		if _, err := f.ReadAt(buf, size-window); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if buf[len(buf)-1] != '\n' {
			return nil, nil
		}
		body := buf[:len(buf)-1]
		if i := bytes.LastIndexByte(body, '\n'); i >= 0 {
			return body[i+1:], nil
		}
		if window == size { // the file is one line
			return body, nil
		}
		if window == MaxLineSize+2 {
			return nil, errors.New("last line longer than " + strconv.Itoa(MaxLineSize) + " bytes")
		}
	}
}

// CauseCount is one cause's share of a run's item records, counted as the
// runner counts them for its summary (stamps have no share).
type CauseCount struct {
	Eligible int64 `json:"eligible"`
	Purged   int64 `json:"purged"`
	Failed   int64 `json:"failed"`
	Skipped  int64 `json:"skipped"`
}

// CountCauses reads the item records of one audit file (a Summary's Path,
// say) and counts them by cause; an item written before policies counts
// as deleted. It reads that file only, once, line by line. Lines that do
// not parse are left out: audit verify is the place that reports them.
func CountCauses(path string) (map[string]CauseCount, error) {
	f, err := openRegular(path, os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	out := make(map[string]CauseCount)
	lines := lineReader{br: bufio.NewReaderSize(f, 64<<10)}
	for {
		raw, newline, tooLong, err := lines.next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("audit: read %s: %w", path, err)
		}
		if tooLong || !newline || !bytes.Contains(raw, []byte(MsgItem)) {
			continue
		}
		rec, reason := parseLine(raw)
		if reason != "" || rec.Item == nil {
			continue
		}
		it := rec.Item
		cause := it.Cause
		if cause == "" {
			cause = CauseDeleted
		}
		cc := out[cause]
		switch it.Status {
		case StatusPurged:
			cc.Purged++
			cc.Eligible++
		case StatusFailed:
			cc.Failed++
			cc.Eligible++
		case StatusDryRun:
			cc.Eligible++
		case StatusSkipped:
			cc.Skipped++
		default:
			continue
		}
		out[cause] = cc
	}
}
