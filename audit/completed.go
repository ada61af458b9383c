package audit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// LastCompleted returns the newest sealed file of a run that completed and
// was not a dry run (the last run that purged what was due), or nil, nil
// when there is none. Like LastRun it reads only each candidate's first and
// last lines, newest first, and stops at the first match; a file whose
// header or footer cannot be read is passed over (verify reports it).
func LastCompleted(root string) (*Summary, error) { return LastCompletedOf(root, "") }

// LastCompletedOf is LastCompleted over the runs of the database dbID
// alone (RunOf): a copy's runs sharing the trail, its restore's replay
// first, are not the original's (spec §10.1).
func LastCompletedOf(root, dbID string) (*Summary, error) {
	months, err := monthDirs(root)
	if err != nil {
		return nil, err
	}
	for i := len(months) - 1; i >= 0; i-- {
		dir := filepath.Join(root, months[i])
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("audit: list %s: %w", dir, err)
		}
		var names []string
		for _, e := range entries {
			if e.Type().IsRegular() && isAuditName(e.Name(), extSealed) {
				names = append(names, e.Name())
			}
		}
		// Names sort by start time; compare them without the extension,
		// as runsNewestFirst does.
		slices.SortFunc(names, func(a, b string) int {
			return strings.Compare(strings.TrimSuffix(b, extSealed), strings.TrimSuffix(a, extSealed))
		})
		for _, name := range names {
			sum, err := summarize(filepath.Join(dir, name))
			var p *Problem
			switch {
			case errors.As(err, &p):
				continue
			case err != nil:
				return nil, err
			}
			if f := sum.Footer; f != nil && f.Status == RunCompleted && !sum.Header.DryRun && RunOf(&sum.Header, dbID) {
				return sum, nil
			}
		}
	}
	return nil, nil
}
