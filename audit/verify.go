package audit

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Report is the result of VerifyDir.
type Report struct {
	Files       int       `json:"files"`       // sealed files checked
	Verified    int       `json:"verified"`    // sealed files that verify
	InProgress  []string  `json:"in_progress"` // .inprogress files (not judged)
	Quarantined []string  `json:"quarantined"` // .corrupt files SealAbandoned set aside (not judged)
	Problems    []Problem `json:"problems"`
}

// VerifyFile checks one sealed file: every line is JSON with the common
// fields, seq runs 0,1,2,…, run_id is constant, prev chains (SHA-256 of the
// previous line's bytes), the header is first and the footer last, and the
// footer's counts equal the item records'. The error is a *Problem wrapped
// with ErrCorrupt, naming the first line found wrong; an error that is not
// a Problem means the file could not be read.
//
// A changed line shows as a broken link to the line after it. When that
// next line chains on correctly to its own successor, the change is blamed
// on the earlier line; otherwise on the line whose prev is wrong.
func VerifyFile(path string) error {
	r, err := Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	return verify(r, path)
}

func verify(r *Reader, name string) error {
	var c chain
	var broken *Record // a line whose prev does not match the line before
	var last int
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if broken != nil {
			return blame(name, broken, rec, err)
		}
		if err != nil {
			return err
		}
		last = rec.Line
		if f := c.accept(&rec); f != nil {
			if f.link {
				broken = &rec // which line changed shows on the next one
				continue
			}
			return &Problem{File: name, Line: rec.Line, Reason: f.reason}
		}
		if rec.Footer != nil {
			if reason := c.tally.mismatch(rec.Footer); reason != "" {
				return &Problem{File: name, Line: rec.Line, Reason: reason}
			}
			if err := verifyFooterExport(name, rec.Line, rec.Footer); err != nil {
				return err
			}
		}
	}
	switch {
	case broken != nil:
		return blame(name, broken, Record{}, io.EOF)
	case c.records == 0:
		return &Problem{File: name, Reason: "empty file"}
	case c.footer == nil:
		return &Problem{File: name, Line: last, Reason: "no footer: the run's file is incomplete"}
	}
	return nil
}

// verifyFooterExport checks the export file a footer names: it exists,
// matches export_sha256 and decompresses to exported records. A problem
// of the export itself names the export file.
func verifyFooterExport(name string, line int, f *Footer) error {
	switch {
	case f.ExportFile == "" && f.Exported != nil && *f.Exported > 0:
		return &Problem{File: name, Line: line, Reason: fmt.Sprintf("footer says %d items were exported but names no export_file", *f.Exported)}
	case f.ExportFile == "":
		return nil
	case f.Exported == nil || f.ExportSHA256 == "":
		return &Problem{File: name, Line: line, Reason: "footer names an export_file without exported and export_sha256"}
	}
	err := VerifyExport(f.ExportFile, f.ExportSHA256, *f.Exported)
	var p *Problem
	if err != nil && !errors.As(err, &p) {
		return &Problem{File: name, Line: line, Reason: "export_file: " + err.Error()}
	}
	return err
}

// blame decides which of two lines a broken link points at: broken's prev
// does not match the line before it; next (with its read error) follows
// broken.
func blame(name string, broken *Record, next Record, nextErr error) *Problem {
	if nextErr == nil && next.Prev != lineHash(broken.Raw) {
		return &Problem{File: name, Line: broken.Line,
			Reason: "line changed: prev does not match the SHA-256 of the line before, nor does the next line's prev match this one"}
	}
	return &Problem{File: name, Line: broken.Line - 1,
		Reason: fmt.Sprintf("line changed: its SHA-256 does not match prev on line %d", broken.Line)}
}

// VerifyDir verifies every sealed file under root (recursively), in name
// order. Files that cannot be read, and folders that cannot be listed, are
// problems too; the error is for a root that cannot be walked at all.
func VerifyDir(root string) (Report, error) {
	rep := Report{InProgress: []string{}, Quarantined: []string{}, Problems: []Problem{}}
	info, err := os.Stat(root)
	if err != nil {
		return rep, fmt.Errorf("audit: %w", err)
	}
	if !info.IsDir() {
		return rep, fmt.Errorf("audit: %s is not a folder", root)
	}
	var sealed []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			rep.Problems = append(rep.Problems, Problem{File: path, Reason: "cannot read: " + err.Error()})
		case d.IsDir():
		case strings.HasSuffix(path, extSealed):
			sealed = append(sealed, path)
		case strings.HasSuffix(path, extInProgress):
			rep.InProgress = append(rep.InProgress, path)
		case strings.HasSuffix(path, extCorrupt):
			rep.Quarantined = append(rep.Quarantined, path)
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("audit: walk %s: %w", root, err)
	}
	slices.Sort(sealed)
	slices.Sort(rep.InProgress)
	slices.Sort(rep.Quarantined)

	for _, path := range sealed {
		rep.Files++
		err := VerifyFile(path)
		var p *Problem
		switch {
		case err == nil:
			rep.Verified++
		case errors.As(err, &p):
			rep.Problems = append(rep.Problems, *p)
		default:
			rep.Problems = append(rep.Problems, Problem{File: path, Reason: err.Error()})
		}
	}
	return rep, nil
}
