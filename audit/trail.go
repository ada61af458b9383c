package audit

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// The trail is followed one way, by a chainIndex over the files read: the
// writer finds the file a new run follows (tailLink), readers anchored at
// a head follow the chain after it (After, Steps), and the verifier checks
// every link (chainProblems).
//
// Readers anchored at a head read only the month folders from the head's
// on, and the few names before the head that the writer's window spans
// (spec §5 Cost): their cost follows the files after the head, never the
// trail's age.

// chainIndex indexes files by the links between them.
type chainIndex struct {
	links []*link // by start time, then path
	// byHash maps a last line's hash to the first file (by start time)
	// ending with it; copyOf maps each later file ending with the same
	// line to that first one.
	byHash map[string]*link
	copyOf map[*link]*link
	// followedBy maps a prev_file to the first file (by start time) that
	// names it; claimed maps each later file naming the same predecessor
	// to that first one. A file naming its own last line follows nothing.
	followedBy map[string]*link
	claimed    map[*link]*link
	followed   map[string]bool // every non-empty prev_file some file names
	first      *link           // the first file whose prev_file is empty
}

// indexChain sorts links by start time and indexes them. The live run's
// file (path live) follows a file but has no last line another may name.
func indexChain(links []*link, live string) *chainIndex {
	slices.SortFunc(links, func(a, b *link) int {
		switch {
		case a.before(b):
			return -1
		case b.before(a):
			return 1
		}
		return 0
	})
	ix := &chainIndex{links: links, byHash: make(map[string]*link, len(links)), copyOf: map[*link]*link{},
		followedBy: make(map[string]*link, len(links)), claimed: map[*link]*link{}, followed: make(map[string]bool, len(links))}
	for _, l := range links {
		if l.lastHash == "" || l.path == live {
			continue
		}
		if first, dup := ix.byHash[l.lastHash]; dup {
			ix.copyOf[l] = first
			continue
		}
		ix.byHash[l.lastHash] = l
	}
	for _, l := range links {
		p := l.prevFile()
		switch {
		case p == nil:
		case *p == "":
			if ix.first == nil {
				ix.first = l
			}
		case *p == l.lastHash:
		case ix.followedBy[*p] != nil:
			ix.followed[*p] = true
			ix.claimed[l] = ix.followedBy[*p]
		default:
			ix.followed[*p] = true
			ix.followedBy[*p] = l
		}
	}
	return ix
}

// follow returns the files the chain reaches after from (from the first
// file when from is nil), in chain order.
func (ix *chainIndex) follow(from *link) []*link {
	reached := map[*link]bool{}
	next := ix.first
	if from != nil {
		reached[from] = true
		next = ix.next(from)
	}
	var chain []*link
	for l := next; l != nil && !reached[l]; l = ix.next(l) {
		reached[l] = true
		chain = append(chain, l)
	}
	return chain
}

// next is the file that follows l; nil when none does.
func (ix *chainIndex) next(l *link) *link {
	if l.lastHash == "" {
		return nil
	}
	return ix.followedBy[l.lastHash]
}

// tail is the newest file (by start time) with a last line that no file
// follows: the one a new run follows. When every one is followed (a loop,
// which only tampering makes), the newest. Nil when no file has a last
// line.
func (ix *chainIndex) tail() *link {
	var newest *link
	for _, l := range slices.Backward(ix.links) {
		if l.lastHash == "" {
			continue
		}
		if !ix.followed[l.lastHash] {
			return l
		}
		if newest == nil {
			newest = l
		}
	}
	return newest
}

// isSealedName reports whether name is a sealed file's name.
func isSealedName(name string) bool { return isAuditName(name, extSealed) }

// sealedIn lists the sealed file names of one month folder, in name
// order; none when the folder does not exist.
func sealedIn(root, month string) ([]string, error) {
	dir := filepath.Join(root, month)
	entries, err := os.ReadDir(dir) // sorted by name
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit: list %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && isSealedName(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// window reads the newest sealed files named before below in month
// folder months[i] (every one there when below is "") and, as far as
// needed, the folders before it: at least tailWindow files, their oldest
// second taken whole (names within one second sort by run ID, not run
// order). names, when not nil, is months[i]'s listing already read. Names
// sort by start time, which disagrees with run order only when clocks
// disagree, so a file's neighbours in the chain are among these.
func window(root string, months []string, i int, names []string, below string) ([]*link, error) {
	var links []*link
	var lastStamp string
	for ; i >= 0; i-- {
		if names == nil {
			var err error
			if names, err = sealedIn(root, months[i]); err != nil {
				return nil, err
			}
		}
		for _, name := range slices.Backward(names) {
			if below != "" && name >= below {
				continue
			}
			if len(links) >= tailWindow && stampOf(name) != lastStamp {
				return links, nil
			}
			lastStamp = stampOf(name)
			l, err := readLink(filepath.Join(root, months[i], name))
			if err != nil {
				return nil, fmt.Errorf("audit: %w", err)
			}
			links = append(links, &l)
		}
		names, below = nil, ""
	}
	return links, nil
}

// tailLink returns the newest sealed file that no other file follows (see
// previousFile), nil when root holds none. It reads the newest names only.
func tailLink(root string) (*link, error) {
	months, err := monthDirs(root)
	if err != nil || len(months) == 0 {
		return nil, err
	}
	links, err := window(root, months, len(months)-1, nil, "")
	if err != nil {
		return nil, fmt.Errorf("previous file: %w", err)
	}
	return indexChain(links, "").tail(), nil
}

// splitHead returns the month folder and file name a head names; ok is
// false when its file is not a sealed file's place under the root.
func splitHead(h Head) (month, name string, ok bool) {
	month, name = path.Split(h.File)
	month = strings.TrimSuffix(month, "/")
	return month, name, isMonthDir(month) && isSealedName(name)
}

// linksFrom reads what a reader anchored at a sealed file's place needs:
// every sealed file named at or after month/name, and the window before
// it (a file chained after it carries an earlier name only when clocks
// disagree, as far as the writer's window reaches).
func linksFrom(root, month, name string) ([]*link, error) {
	months, err := monthDirs(root)
	if err != nil {
		return nil, err
	}
	at, _ := slices.BinarySearch(months, month) // the head's folder, or the first after it
	var links []*link
	for i := at; i < len(months); i++ {
		names, err := sealedIn(root, months[i])
		if err != nil {
			return nil, err
		}
		if months[i] == month {
			before, err := window(root, months, i, names, name)
			if err != nil {
				return nil, err
			}
			links = append(links, before...)
		}
		for _, n := range names {
			if months[i] == month && n < name {
				continue
			}
			l, err := readLink(filepath.Join(root, months[i], n))
			if err != nil {
				return nil, fmt.Errorf("audit: %w", err)
			}
			links = append(links, &l)
		}
	}
	if at == len(months) || months[at] != month {
		// The head's folder is gone: the window ends in the folders before.
		before, err := window(root, months, at-1, nil, "")
		if err != nil {
			return nil, err
		}
		links = append(links, before...)
	}
	return links, nil
}

// headLinks reads what a reader anchored at head needs (linksFrom the
// head's file); every sealed file for the zero head, or a head that names
// no file's place.
func headLinks(root string, head Head) ([]*link, error) {
	month, name, ok := splitHead(head)
	if head.IsZero() || !ok {
		return sealedLinks(root)
	}
	return linksFrom(root, month, name)
}

// sealedLinks reads the first and last lines of every sealed file under
// root.
func sealedLinks(root string) ([]*link, error) {
	paths, err := monthFiles(root, isSealedName)
	if err != nil {
		return nil, err
	}
	links := make([]*link, 0, len(paths))
	for _, p := range paths {
		l, err := readLink(p)
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		links = append(links, &l)
	}
	return links, nil
}
