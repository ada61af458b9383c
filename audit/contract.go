package audit

// This file holds the exported surface not implemented yet.

import "errors"

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
