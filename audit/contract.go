package audit

// This file holds the exported surface not implemented yet.

import (
	"errors"
	"time"
)

var errTODO = errors.New("audit: not implemented yet")

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
func LastRun(root string) (*Summary, error) { return nil, errTODO }

// SealAbandoned finds .inprogress files under root left by crashed runs,
// drops a torn last line, appends a footer with status "aborted" and the
// counts of the records present, and renames them. Returns the sealed paths.
// Files named in skip (the caller's own open file) are left alone.
func SealAbandoned(root string, now time.Time, skip ...string) ([]string, error) {
	return nil, errTODO
}
