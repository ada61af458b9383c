package audit

import (
	"path/filepath"
	"slices"
	"strings"
)

// ItemKey names an item in the audit trail.
type ItemKey struct {
	Type string // ItemThread | ItemMessage
	ID   string
}

// PurgedSince reports which of want already have a "purged" record in the
// sealed file of run runID or in any sealed file after it (file names sort
// by start time). Recovery asks it before writing a record for a purge a
// killed run finished: that run may have synced the record and died before
// clearing its marker, and an item has exactly one "purged" record (spec
// §5). A run whose file is not found has recorded nothing. Lines that do
// not parse are passed over: they record nothing.
func PurgedSince(root, runID string, want map[ItemKey]bool) (map[ItemKey]bool, error) {
	found := make(map[ItemKey]bool)
	if len(want) == 0 || !validRunID(runID) {
		return found, nil
	}
	files, err := monthFiles(root, func(name string) bool { return isAuditName(name, extSealed) })
	if err != nil {
		return nil, err
	}
	slices.SortFunc(files, func(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) })
	first := slices.IndexFunc(files, func(p string) bool { return strings.HasSuffix(p, "-"+runID+extSealed) })
	if first < 0 {
		return found, nil
	}
	for _, path := range files[first:] {
		if err := purgedIn(path, want, found); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// purgedIn adds to found the items of want that file path records purged.
func purgedIn(path string, want, found map[ItemKey]bool) error {
	return Purged(path, func(it Item) error {
		if k := (ItemKey{it.ItemType, it.ItemID}); want[k] {
			found[k] = true
		}
		return nil
	})
}
