package audit

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"path/filepath"
)

// Head names a point in the audit trail: a sealed file, by its run, its
// path under the audit root and the hex SHA-256 of its footer line (what
// the next file's prev_file holds, spec §10 audit_head). The zero Head is
// the point before the first file.
type Head struct {
	RunID  string `json:"run_id"`
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
}

// IsZero reports whether h is the point before the first file.
func (h Head) IsZero() bool { return h.SHA256 == "" }

// HeadOf returns the Head naming a sealed file under root.
func HeadOf(root, path, runID, footerHash string) Head {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		rel = path
	}
	return Head{RunID: runID, File: filepath.ToSlash(rel), SHA256: footerHash}
}

// CurrentHead returns the newest sealed file of the trail, the one the
// next run's file will follow; the zero Head when root holds none. The
// caller holds the retention lease, so no run seals a file meanwhile.
func CurrentHead(root string) (Head, error) {
	tail, err := tailLink(root)
	if err != nil || tail == nil {
		return Head{}, err
	}
	return HeadOf(root, tail.path, tail.runID, tail.lastHash), nil
}

// TrailFile is one sealed file after a Head.
type TrailFile struct {
	Path   string
	RunID  string
	Header Header
}

// Trail is what After finds: the sealed files that follow the head, in
// chain order, and what keeps the part after the head from verifying.
type Trail struct {
	Files []TrailFile
	// Unlinked are the sealed files after the head (by start time) that
	// the chain does not reach; each is also a Problem.
	Unlinked []TrailFile
	Problems []Problem
}

// ErrHeadNotFound: the trail holds no sealed file whose footer matches
// the head (the file was deleted or changed).
var ErrHeadNotFound = errors.New("audit head not found in the trail")

// After follows the chain of files from head (prev_file links, spec §5)
// and returns every sealed file after it, each verified (with pub, when
// set, its footer's signature too). A missing head file, a broken link
// (a file after the head that the chain does not reach: a file between
// was deleted or changed) and a file that does not verify are Problems;
// the files the chain reaches are returned all the same, so that a caller
// told to go on over a broken trail can. It reads each file's first and
// last lines, and every line of the files after the head.
func After(root string, head Head, pub ed25519.PublicKey) (Trail, error) {
	var tr Trail
	links, err := headLinks(root, head)
	if err != nil {
		return tr, err
	}
	chain, unlinked, problems := chainAfter(root, links, head)
	tr.Problems = problems
	check := func(l *link) TrailFile {
		tf := TrailFile{Path: l.path, RunID: l.runID}
		if l.header != nil {
			tf.Header = *l.header
		}
		if _, err := verifyFile(l.path, pub); err != nil {
			var p *Problem
			if !errors.As(err, &p) {
				p = &Problem{File: l.path, Reason: err.Error()}
			}
			tr.Problems = append(tr.Problems, *p)
		}
		return tf
	}
	for _, l := range chain {
		tr.Files = append(tr.Files, check(l))
	}
	for _, l := range unlinked {
		tr.Unlinked = append(tr.Unlinked, check(l))
	}
	return tr, nil
}

// Step is one sealed file of the chain after a head (Steps).
type Step struct {
	Head   Head    // names the file
	Header *Header // nil when its first line is not a header
	// Purged is the footer's count of purged items; -1 when the last line
	// is not a footer.
	Purged int64
}

// Steps follows the chain from head and returns the sealed files after it
// in chain order, reading each file's first and last lines only. whole is
// false when the part after the head is not whole: the head file is gone
// or changed, or a sealed file after it is not reached by the chain.
func Steps(root string, head Head) (steps []Step, whole bool, err error) {
	links, err := headLinks(root, head)
	if err != nil {
		return nil, false, err
	}
	chain, _, problems := chainAfter(root, links, head)
	for _, l := range chain {
		st := Step{Head: HeadOf(root, l.path, l.runID, l.lastHash), Header: l.header, Purged: -1}
		if l.footer != nil {
			st.Purged = l.footer.Purged
		}
		steps = append(steps, st)
	}
	return steps, len(problems) == 0, nil
}

// Pending counts the purged records of the sealed files after head, by
// their footers, passing over the run skip and replays (trigger restore
// or start: their items were recorded purged before, by the runs they
// replay). ok is false when the chain from head does not reach every
// sealed file after it, or a footer cannot be read. It reads each file's
// first and last lines only.
func Pending(root string, head Head, skip string) (purged int64, ok bool, err error) {
	steps, whole, err := Steps(root, head)
	if err != nil {
		return 0, false, err
	}
	for _, st := range steps {
		if st.Head.RunID == skip || IsReplay(st.Header) {
			continue
		}
		if st.Purged < 0 {
			whole = false
			continue
		}
		purged += st.Purged
	}
	return purged, whole, nil
}

// IsReplay reports whether a header is a replay run's.
func IsReplay(h *Header) bool { return h != nil && IsReplayTrigger(h.Trigger) }

// IsReplayTrigger reports whether a run's trigger makes it a replay.
func IsReplayTrigger(trigger string) bool {
	return trigger == TriggerRestore || trigger == TriggerStart
}

// chainAfter follows prev_file links from head through the files read
// for it (headLinks) and returns the files after it in chain order, the
// sealed files after the head (by start time) that the chain does not
// reach, and the problems that keep the part after the head from being
// whole: a head file that is gone or changed, or a sealed file after the
// head that the chain does not reach.
func chainAfter(root string, links []*link, head Head) (chain, unlinked []*link, problems []Problem) {
	ix := indexChain(links, "")
	var start *link // the head file; nil for the zero head
	if !head.IsZero() {
		start = ix.byHash[head.SHA256]
		if start == nil {
			problems = append(problems, Problem{File: filepath.Join(root, filepath.FromSlash(head.File)),
				Reason: fmt.Sprintf("%v: no sealed file ends with the footer of run %s (deleted or changed)", ErrHeadNotFound, head.RunID)})
			// What follows the head is known by start time only.
			headStart, _, _ := ParseName(head.File)
			for _, l := range ix.links {
				if l.start.After(headStart) || l.start.Equal(headStart) && l.runID != head.RunID {
					unlinked = append(unlinked, l)
				}
			}
			return nil, unlinked, problems
		}
	}
	chain = ix.follow(start)
	reached := make(map[*link]bool, len(chain))
	for _, l := range chain {
		reached[l] = true
	}
	for _, l := range ix.links {
		if reached[l] || l == start || start != nil && (!start.before(l) || l.prevFile() == nil) {
			continue
		}
		unlinked = append(unlinked, l)
		problems = append(problems, Problem{File: l.path, Line: 1,
			Reason: "not linked from the head by prev_file: a file before it was deleted or changed"})
	}
	return chain, unlinked, problems
}

// Purged calls fn with every item record of status purged in the file at
// path, in order. Lines that do not parse record nothing and are passed
// over (After reports them).
func Purged(path string, fn func(Item) error) error {
	r, err := Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	return eachRecord(r, func(rec Record) error {
		if it := rec.Item; it != nil && it.Status == StatusPurged {
			return fn(*it)
		}
		return nil
	})
}

// eachRecord calls fn with every record r reads, in order, until the end
// of the file or an error, which it returns. Lines that do not parse are
// passed over: the readers of records leave naming them to the verifier.
func eachRecord(r *Reader, fn func(Record) error) error {
	for {
		rec, err := r.Next()
		var p *Problem
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.As(err, &p):
			continue
		case err != nil:
			return err
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
}
