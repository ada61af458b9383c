package audit

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Report is the result of VerifyDir.
type Report struct {
	Files       int      `json:"files"`       // sealed files checked
	Verified    int      `json:"verified"`    // sealed files no problem names (lines, name and links)
	InProgress  []string `json:"in_progress"` // .inprogress files, the live one included
	Live        string   `json:"live"`        // the in-progress file of the run holding the lease; "" when none
	Quarantined []string `json:"quarantined"` // .corrupt files SealAbandoned set aside
	Other       []string `json:"other"`       // files that are not audit files
	// Since is the sealed file a check from a run on starts at (verify
	// --since); absent when every file was checked.
	Since string `json:"since,omitempty"`
	// Exports, when the caller checks an export folder too
	// (VerifyExportDir): its files and their problems.
	Exports *ExportReport `json:"exports,omitempty"`
	// Problems lists every failure: files that do not verify, broken links
	// between files, and every file other than sealed ones and the live
	// run's (in progress, set aside, or not an audit file at all).
	Problems []Problem `json:"problems"`
}

// VerifyOptions tune VerifyDirWith.
type VerifyOptions struct {
	// PublicKey, when set, requires every sealed file's footer to carry a
	// signature that verifies with it.
	PublicKey ed25519.PublicKey
	// Live reports whether the run whose header an in-progress file holds
	// still runs (holds the lease). That one file is not a problem; every
	// other in-progress file is. Nil: no run is live.
	Live func(Header) bool
	// Belongs reports other files that belong in the tree, such as the
	// lease's files when LEASE_PATH lies inside it. The lease's files at
	// their default place (<root>/retention.lock and its companions) always
	// belong.
	Belongs func(path string) bool
	// Since, when set, checks from this run's sealed file on: the files
	// from it on, and its link to the file before it (verify --since).
	Since string
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
	_, err := verifyFile(path, nil)
	return err
}

// verifyFile is VerifyFile that also checks the footer's signature when
// pub is set. It returns the number of the last line read, which is the
// footer's when the file verifies.
func verifyFile(path string, pub ed25519.PublicKey) (int, error) {
	r, err := Open(path)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	return verify(r, path, pub)
}

func verify(r *Reader, name string, pub ed25519.PublicKey) (last int, _ error) {
	var c chain
	var broken *Record // a line whose prev does not match the line before
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if broken != nil {
			return last, blame(name, broken, rec, err)
		}
		if err != nil {
			return last, err
		}
		last = rec.Line
		if f := c.accept(&rec); f != nil {
			if f.link {
				broken = &rec // which line changed shows on the next one
				continue
			}
			return last, &Problem{File: name, Line: rec.Line, Reason: f.reason}
		}
		if rec.Footer != nil {
			if reason := c.tally.mismatch(rec.Footer); reason != "" {
				return last, &Problem{File: name, Line: rec.Line, Reason: reason}
			}
			if err := verifyFooterExport(name, rec.Line, rec.Footer); err != nil {
				return last, err
			}
			if pub != nil {
				if reason := checkSignature(pub, &rec); reason != "" {
					return last, &Problem{File: name, Line: rec.Line, Reason: reason}
				}
			}
		}
	}
	switch {
	case broken != nil:
		return last, blame(name, broken, Record{}, io.EOF)
	case c.records == 0:
		return last, &Problem{File: name, Reason: "empty file"}
	case c.footer == nil:
		return last, &Problem{File: name, Line: last, Reason: "no footer: the run's file is incomplete"}
	}
	return last, nil
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

// VerifyDir is VerifyDirWith without options: no file is live and
// signatures are not checked.
func VerifyDir(root string) (Report, error) {
	return VerifyDirWith(root, VerifyOptions{})
}

// VerifyDirWith verifies every sealed file under root (recursively), in
// name order, then the links between files: each header's prev_file must
// name the last line of another sealed file, no two files may follow the
// same one, only the first file may have an empty prev_file, and files
// without prev_file (written before it existed) may only come first. Every
// file's name must match its header's run_id and start time. Every other
// file in the tree is reported too, except the live run's in-progress file
// and the lease's files. Non-regular files are never opened. Files that
// cannot be read, and folders that cannot be listed, are problems; the
// error is for a root that cannot be walked at all. With o.Since set it
// checks the trail from that run on (verifySince).
func VerifyDirWith(root string, o VerifyOptions) (Report, error) {
	info, err := os.Stat(root)
	if err != nil {
		return newReport(), fmt.Errorf("audit: %w", err)
	}
	if !info.IsDir() {
		return newReport(), fmt.Errorf("audit: %s is not a folder", root)
	}
	if o.Since != "" {
		return verifySince(root, o)
	}
	rep, err := verifyTrail(root, o, nil)
	if err != nil {
		return rep, err
	}
	shardsVerified, err := verifyShards(filepath.Join(filepath.Clean(root), ShardsDir), o, &rep)
	if err != nil {
		return rep, err
	}
	rep.Verified += shardsVerified
	sortProblems(rep.Problems)
	return rep, nil
}

func newReport() Report {
	return Report{InProgress: []string{}, Quarantined: []string{}, Other: []string{}, Problems: []Problem{}}
}

func sortProblems(ps []Problem) {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		return a.Line - b.Line
	})
}

// anchor is where a partial check starts (verify --since): a sealed
// file's month folder and name. The files named before it are not checked,
// but those the writer's window spans are read for their links.
type anchor struct{ month, name string }

// checks reports whether the sealed file at path, under root, is one a
// check from a (nil: every file) covers.
func (a *anchor) checks(root, path string) bool {
	if a == nil {
		return true
	}
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return false
	}
	month, name := filepath.Split(rel)
	month = filepath.Clean(month)
	return month > a.month || month == a.month && name >= a.name
}

// verifyTrail verifies the one trail at root (its shards aside), every
// file of it, or from a on: the sealed files from a's on and their links,
// including the first one's to the file before it, and every other file
// in a's month folder and after.
func verifyTrail(root string, o VerifyOptions, a *anchor) (Report, error) {
	rep := newReport()
	problem := func(path string, line int, reason string) {
		rep.Problems = append(rep.Problems, Problem{File: path, Line: line, Reason: reason})
	}
	var sealed []string
	clean := filepath.Clean(root)
	shards := filepath.Join(clean, ShardsDir)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			problem(path, 0, "cannot read: "+err.Error())
			return nil
		}
		name := d.Name()
		switch {
		case d.IsDir() && path == shards:
			return filepath.SkipDir // each shard's trail is a chain of its own
		case d.IsDir() && a != nil && filepath.Dir(path) == clean && isMonthDir(name) && name < a.month:
			return filepath.SkipDir // before the check's start
		case d.IsDir():
		case isLeaseFile(root, path) || o.Belongs != nil && o.Belongs(path):
		case !d.Type().IsRegular():
			rep.Other = append(rep.Other, path)
			problem(path, 0, fmt.Sprintf("not a regular file (%s): not an audit file, not opened", d.Type()))
		case strings.HasSuffix(name, extSealed):
			if a.checks(root, path) {
				sealed = append(sealed, path)
			}
		case strings.HasSuffix(name, extInProgress):
			rep.InProgress = append(rep.InProgress, path)
		case strings.HasSuffix(name, extCorrupt):
			rep.Quarantined = append(rep.Quarantined, path)
			problem(path, 0, "set aside: an in-progress file too damaged to seal (see the seal's log)")
		default:
			rep.Other = append(rep.Other, path)
			problem(path, 0, "not an audit file")
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("audit: walk %s: %w", root, err)
	}
	slices.Sort(sealed)
	slices.Sort(rep.InProgress)
	slices.Sort(rep.Quarantined)
	slices.Sort(rep.Other)

	var nodes []*link // files that take part in the chain between files
	for _, path := range sealed {
		rep.Files++
		lines, err := verifyFile(path, o.PublicKey)
		var p *Problem
		switch {
		case err == nil:
		case errors.As(err, &p):
			rep.Problems = append(rep.Problems, *p)
		default:
			problem(path, 0, err.Error())
			continue
		}
		l, err := readLink(path)
		if err != nil {
			problem(path, 0, err.Error())
			continue
		}
		l.lastLine = lines
		if reason := nameProblem(&l, extSealed); reason != "" {
			problem(path, 1, reason)
		}
		nodes = append(nodes, &l)
	}
	aside := make(map[string]string) // last-line hash → a file that is not sealed
	for _, path := range append(slices.Clone(rep.InProgress), rep.Quarantined...) {
		l, err := readLink(path)
		if err != nil {
			problem(path, 0, err.Error())
			continue
		}
		if l.lastHash != "" {
			aside[l.lastHash] = path
		}
		if !strings.HasSuffix(path, extInProgress) {
			continue
		}
		if rep.Live == "" && l.header != nil && o.Live != nil && o.Live(*l.header) {
			rep.Live = path
			if reason := nameProblem(&l, extInProgress); reason != "" {
				problem(path, 1, reason)
			}
			nodes = append(nodes, &l)
			continue
		}
		problem(path, 0, "in progress, but no live run holds the lease: left by a crashed run (the next start or run seals it), or a sealed file renamed")
	}
	links := chainProblems(nodes, aside, rep.Live)
	if a != nil {
		// The files before the check's start take part in the links
		// (the first checked file's prev_file names one of them), but
		// what is wrong with them alone is not this check's to say.
		months, err := monthDirs(root)
		if err != nil {
			return rep, err
		}
		i, _ := slices.BinarySearch(months, a.month)
		before, err := window(root, months, i, nil, a.name)
		if err != nil {
			return rep, err
		}
		links = nil
		all := slices.Concat(before, nodes)
		for _, p := range chainProblems(all, aside, rep.Live) {
			if a.checks(root, p.File) || !strings.HasSuffix(p.File, extSealed) {
				links = append(links, p)
			}
		}
		// The trail's first file is not in view: a checked file that
		// claims to be it has files before it.
		if first := indexChain(all, rep.Live).first; first != nil && len(before) > 0 && a.checks(root, first.path) {
			links = append(links, Problem{File: first.path, Line: 1, Reason: fmt.Sprintf(
				"prev_file is empty, as in the first file, but %s starts before it", before[0].path)})
		}
	}
	rep.Problems = append(rep.Problems, links...)
	// A sealed file verifies when no problem names it: its own lines, its
	// name and its links to the files around it. A file whose own lines
	// chain but whose footer no longer matches what the next file recorded
	// was changed too, and must not count as verified.
	failed := make(map[string]bool, len(rep.Problems))
	for _, p := range rep.Problems {
		failed[p.File] = true
	}
	for _, path := range sealed {
		if !failed[path] {
			rep.Verified++
		}
	}
	sortProblems(rep.Problems)
	return rep, nil
}

// ErrRunNotFound: no trail under the folder holds a sealed file of the run
// a check from a run on names.
var ErrRunNotFound = errors.New("no sealed audit file of the run")

// verifySince checks the trail that holds run o.Since's sealed file (the
// root's, or a shard's on a cluster node) from that file on (spec §9
// audit verify --since): every file from it on, and its link to the part
// before. It reads the month folders from that file's on, and the few
// files before it that the writer's window spans.
func verifySince(root string, o VerifyOptions) (Report, error) {
	if !validRunID(o.Since) {
		return newReport(), fmt.Errorf("audit: %w: %q", ErrInvalidRunID, o.Since)
	}
	trails := []string{root}
	shards := filepath.Join(filepath.Clean(root), ShardsDir)
	if entries, err := os.ReadDir(shards); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				trails = append(trails, filepath.Join(shards, e.Name()))
			}
		}
	}
	suffix := "-" + o.Since + extSealed
	for _, trail := range trails {
		months, err := monthDirs(trail)
		if err != nil {
			return newReport(), err
		}
		for _, month := range slices.Backward(months) {
			names, err := sealedIn(trail, month)
			if err != nil {
				return newReport(), err
			}
			for _, name := range names {
				if strings.HasSuffix(name, suffix) {
					rep, err := verifyTrail(trail, o, &anchor{month: month, name: name})
					rep.Since = filepath.Join(trail, month, name)
					return rep, err
				}
			}
		}
	}
	return newReport(), fmt.Errorf("audit: %w %s under %s", ErrRunNotFound, o.Since, root)
}

// ShardsDir is the folder of a cluster node's audit root holding one trail
// per shard, <AUDIT_PATH>/shards/<n>/ (spec §11). Each is a chain of its
// own, verified as such; so is a shard's older trail a move set aside
// beside it.
const ShardsDir = "shards"

// verifyShards verifies each folder under shards as a trail of its own and
// adds what it finds to rep. It returns how many of their sealed files
// verified.
func verifyShards(shards string, o VerifyOptions, rep *Report) (int, error) {
	entries, err := os.ReadDir(shards)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return 0, nil
	case err != nil:
		rep.Problems = append(rep.Problems, Problem{File: shards, Reason: "cannot read: " + err.Error()})
		return 0, nil
	}
	verified := 0
	for _, e := range entries {
		path := filepath.Join(shards, e.Name())
		if !e.IsDir() {
			rep.Other = append(rep.Other, path)
			rep.Problems = append(rep.Problems, Problem{File: path, Reason: "not a shard's audit folder"})
			continue
		}
		sub, err := VerifyDirWith(path, o)
		if err != nil {
			return verified, err
		}
		rep.Files += sub.Files
		verified += sub.Verified
		rep.InProgress = append(rep.InProgress, sub.InProgress...)
		rep.Quarantined = append(rep.Quarantined, sub.Quarantined...)
		rep.Other = append(rep.Other, sub.Other...)
		rep.Problems = append(rep.Problems, sub.Problems...)
		if rep.Live == "" {
			rep.Live = sub.Live
		}
	}
	return verified, nil
}

// isLeaseFile reports whether path is one of the lease's files at its
// default place, <root>/retention.lock (spec §4), or a companion of it.
func isLeaseFile(root, path string) bool {
	if filepath.Dir(path) != filepath.Clean(root) {
		return false
	}
	name := filepath.Base(path)
	switch name {
	case defaultLease, defaultLease + ".flock", defaultLease + ".epoch":
		return true
	}
	// An atomic write of the lease or epoch file under way.
	return strings.HasPrefix(name, "."+defaultLease+".") && strings.Contains(name, ".tmp-")
}

// defaultLease is the lease file's name at its default place.
const defaultLease = "retention.lock"

// nameProblem checks a file's name and month folder against its header.
func nameProblem(l *link, ext string) string {
	if l.header == nil {
		return "" // the file's own check reports the header
	}
	start := l.header.StartedAt
	want := filePrefix + start.Format(stampLayout) + "-" + l.runID + ext
	if got := filepath.Base(l.path); got != want {
		return fmt.Sprintf("file name does not match its header (run_id %q, started_at %s): want %s",
			l.runID, start.Format(time.RFC3339Nano), want)
	}
	if month := filepath.Base(filepath.Dir(l.path)); month != start.Format(monthLayout) {
		return fmt.Sprintf("file is in folder %q, but its run started in %s", month, start.Format(monthLayout))
	}
	return ""
}

// unfollowedBefore returns the newest of nodes (sorted by start time) that
// is sealed and that no file follows, or nil.
func unfollowedBefore(nodes []*link, followed map[string]bool, live string) *link {
	for _, l := range slices.Backward(nodes) {
		if l.path != live && l.lastHash != "" && !followed[l.lastHash] {
			return l
		}
	}
	return nil
}

// chainProblems checks the links between files. nodes are the sealed files
// and the live one; aside maps last-line hashes of files that are not
// sealed to their paths, to name them when a link points there.
func chainProblems(nodes []*link, aside map[string]string, live string) []Problem {
	var out []Problem
	add := func(l *link, format string, args ...any) {
		out = append(out, Problem{File: l.path, Line: 1, Reason: fmt.Sprintf(format, args...)})
	}
	ix := indexChain(nodes, live)
	nodes = ix.links
	for _, l := range nodes {
		if first, dup := ix.copyOf[l]; dup {
			add(l, "same last line as %s: a copy of another run's file", first.path)
		}
	}
	anyLegacy := slices.ContainsFunc(nodes, func(l *link) bool { return l.header != nil && l.prevFile() == nil })
	var legacy []*link
	var firstChained *link
	for i, l := range nodes {
		if l.header == nil {
			continue // the file's own check reports it
		}
		prev := l.prevFile()
		if prev == nil {
			legacy = append(legacy, l)
			continue
		}
		if firstChained == nil {
			firstChained = l
		}
		if *prev == "" {
			switch {
			case l != ix.first:
				add(l, "prev_file is empty, as in the first file, but %s already is the first", ix.first.path)
			case anyLegacy:
				add(l, "prev_file is empty, as in the first file, but files written before prev_file existed are in the tree")
			}
			continue
		}
		before := "none"
		if i > 0 {
			before = nodes[i-1].path
		}
		pred, ok := ix.byHash[*prev]
		switch {
		case !ok && aside[*prev] != "":
			add(l, "prev_file names the last line of %s, which is not a sealed file", aside[*prev])
		case !ok:
			add(l, "prev_file matches no sealed file's last line: the file before it (by start time: %s) was changed, or a file was deleted", before)
			// The file that lost its follower is the one changed: name it,
			// at its last line, so that the edited file itself is reported
			// and not only the one after it.
			if p := unfollowedBefore(nodes[:i], ix.followed, live); p != nil {
				out = append(out, Problem{File: p.path, Line: p.lastLine, Reason: fmt.Sprintf(
					"last line changed: its SHA-256 is no file's prev_file, while %s, which starts after it, names a last line no sealed file has (or a file between them was deleted)", l.path)})
			}
		case pred == l:
			add(l, "prev_file names the file itself")
		case ix.claimed[l] != nil:
			add(l, "prev_file names %s, which %s follows already: two files claim the same predecessor", pred.path, ix.claimed[l].path)
		}
	}
	if firstChained != nil {
		for _, l := range legacy {
			if firstChained.before(l) {
				add(l, "header has no prev_file, but files with prev_file start before it (%s): the header was edited or the file copied in", firstChained.path)
			}
		}
	}
	return out
}
