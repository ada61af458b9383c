package audit

import (
	"bufio"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/progressdb/progressdb/server/pkg/durable"
)

// abandonedReason is the footer reason of a run sealed by a later one.
const abandonedReason = "run did not finish (process ended)"

// SealAbandoned finds .inprogress files under root left by crashed runs,
// drops a torn last line, appends a footer with status "aborted" and the
// counts of the records present, and renames them. Returns the sealed paths.
// Files named in skip (the caller's own open file) are left alone.
//
// A torn last line is one without a newline, one that is not a valid
// record, or one that does not chain to the line before; it is cut off and
// the chain continues from the last good line. A file whose last good line
// already is a footer (its run ended between writing the footer and the
// rename) is only renamed. An empty file (a run killed before its header)
// is removed: that run did nothing. A file without a valid header, or damaged before
// its last line, is never cut: it is renamed to .jsonl.corrupt and reported
// in the error as a *Problem (errors.Is(err, ErrCorrupt)). Other files are
// still sealed.
//
// The caller must hold the retention lease, so that no live run's file is
// sealed.
func SealAbandoned(root string, now time.Time, skip ...string) ([]string, error) {
	return SealAbandonedWith(root, now, Options{}, skip...)
}

// SealAbandonedWith is SealAbandoned with options: with a signing key, the
// aborted footers it writes are signed.
func SealAbandonedWith(root string, now time.Time, o Options, skip ...string) ([]string, error) {
	paths, err := InProgress(root)
	return sealEach(paths, err, skip, func(path string) (string, error) {
		if o.Replicate != nil {
			return sealReplicated(path, now, o)
		}
		return sealFile(path, now, o.SigningKey)
	})
}

// sealEach seals every path of an in-progress listing (listErr is the
// listing's own error) but those in skip, and returns the final paths of
// those sealed; seal returns "" for a file it removed. One file that
// cannot be sealed does not keep the others in progress.
func sealEach(paths []string, listErr error, skip []string, seal func(path string) (string, error)) ([]string, error) {
	skipped := make(map[string]bool, len(skip))
	for _, p := range skip {
		skipped[pathKey(p)] = true
	}
	var sealed []string
	errs := []error{listErr}
	for _, path := range paths {
		if skipped[pathKey(path)] {
			continue
		}
		final, err := seal(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if final != "" {
			sealed = append(sealed, final)
		}
	}
	return sealed, errors.Join(errs...)
}

// pathKey makes paths comparable however they were spelt.
func pathKey(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return filepath.Clean(p)
}

// openToSeal opens an abandoned .inprogress file (audit or export) for
// sealing and returns the name it is sealed under, refusing to seal over
// an existing file.
func openToSeal(path string) (final string, f *os.File, err error) {
	final = strings.TrimSuffix(path, suffixInProgress)
	if _, err := os.Lstat(final); err == nil {
		return "", nil, fmt.Errorf("audit: seal %s: %s already exists", path, final)
	}
	if f, err = openRegular(path, os.O_RDWR); err != nil {
		return "", nil, fmt.Errorf("audit: seal %s: %w", path, err)
	}
	return final, f, nil
}

// sealFile seals one abandoned file and returns its final path.
func sealFile(path string, now time.Time, key ed25519.PrivateKey) (string, error) {
	final, f, err := openToSeal(path)
	if err != nil {
		return "", err
	}
	s, err := scanPrefix(f, path)
	if err == nil && s.chain.header == nil && s.bad == nil {
		// Empty: the run was killed between creating its file and writing
		// its header, before it could purge anything (a run purges only
		// after its header is synced). Nothing happened to record.
		_ = f.Close()
		return "", removeNeverStarted(path)
	}
	if err == nil && (s.chain.header == nil || s.bad != nil && !s.badIsLast) {
		_ = f.Close()
		return "", quarantine(path, s)
	}
	if err == nil && s.bad != nil {
		err = f.Truncate(s.goodEnd)
	}
	if err == nil && s.chain.footer == nil {
		err = appendAbortFooter(f, s, now, key)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("audit: seal %s: %w", path, err)
	}
	if err := renameNew(path, final); err != nil {
		return "", fmt.Errorf("audit: seal %s: %w", path, err)
	}
	if err := durable.SyncDir(filepath.Dir(path)); err != nil {
		return "", fmt.Errorf("audit: seal %s: %w", path, err)
	}
	return final, nil
}

// appendAbortFooter writes the footer of an abandoned run after the last
// good line, continuing its chain.
func appendAbortFooter(f *os.File, s scan, now time.Time, key ed25519.PrivateKey) error {
	footer := s.chain.tally.footer()
	footer.FinishedAt = now.UTC()
	footer.Status = RunAborted
	footer.Reason = abandonedReason
	footer.DurationMS = max(0, now.Sub(s.chain.header.StartedAt).Milliseconds())
	line, err := encodeFooter(now, s.chain.runID, s.chain.records, s.chain.lastHash, footer, key)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(append(line, '\n'), s.goodEnd)
	return err
}

// removeNeverStarted removes the empty file of a run that never wrote its
// header.
func removeNeverStarted(path string) error {
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("audit: remove the empty file of a run that never started %s: %w", path, err)
	}
	if err := durable.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("audit: remove %s: %w", path, err)
	}
	return nil
}

// quarantine renames a file that cannot be sealed to .jsonl.corrupt, so it
// is kept but never taken for a complete run, and returns the Problem that
// reports it.
func quarantine(path string, s scan) error {
	corrupt := strings.TrimSuffix(path, extInProgress) + extCorrupt
	if err := renameNew(path, corrupt); err != nil {
		return fmt.Errorf("audit: set aside %s: %w", path, err)
	}
	if err := durable.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("audit: set aside %s: %w", path, err)
	}
	p := &Problem{File: corrupt, Line: s.bad.Line, Reason: s.bad.Reason}
	if s.chain.header == nil {
		p.Reason = "no valid header (" + p.Reason + "), set aside instead of sealed"
	} else {
		p.Reason += ", and lines follow it: set aside instead of sealed"
	}
	return p
}

// scan is what scanPrefix learned about a file.
type scan struct {
	chain     chain    // the good lines
	goodEnd   int64    // offset just past the last good line
	bad       *Problem // the first line that is not good, if any
	badIsLast bool     // nothing follows the bad line
}

// scanPrefix reads lines until the first one that is not a good
// continuation of the chain, and notes whether anything follows it.
func scanPrefix(src io.Reader, name string) (scan, error) {
	lines := lineReader{br: bufio.NewReaderSize(src, 64<<10)}
	var s scan
	for n := 1; ; n++ {
		raw, newline, tooLong, err := lines.next()
		if errors.Is(err, io.EOF) {
			return s, nil
		}
		if err != nil {
			return s, err
		}
		var reason string
		switch {
		case tooLong:
			reason = "line longer than " + strconv.Itoa(MaxLineSize) + " bytes"
		case !newline:
			reason = "last line has no newline (torn write)"
		default:
			rec, why := parseLine(raw)
			if reason = why; reason == "" {
				if f := s.chain.accept(&rec); f != nil {
					reason = f.reason
				}
			}
		}
		if reason == "" {
			s.goodEnd = lines.offset
			continue
		}
		s.bad = &Problem{File: name, Line: n, Reason: reason}
		_, _, _, err = lines.next()
		if errors.Is(err, io.EOF) {
			s.badIsLast = true
			return s, nil
		}
		return s, err
	}
}
