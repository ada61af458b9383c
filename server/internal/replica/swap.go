package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/progressdb/progressdb/server/pkg/durable"
)

// Swapping a snapshot's state in (docs/replication-design.md §7). The
// state is the database folder and the folders that go with it outside
// it (a sealed shard's key store, the shard's audit trail:
// Folder.beside), each unpacked beside its own (<dir>.snapshot). The staged database holds a journal naming those
// folders, so that RecoverFolder, given the database folder alone, finds
// them. Setting the old database aside is the commit point: before it
// every old folder stands and the staged ones go; after it every staged
// one takes its folder's place.

// swapJournal, in a staged database folder, names the folders swapped
// in with it (JSON, a list of paths); it is removed once they all are.
const swapJournal = ".progressdb-snapshot-beside"

// writeJournal records beside in the staged database folder, synced.
func writeJournal(staged string, beside []string) error {
	if len(beside) == 0 {
		return nil
	}
	data, err := json.Marshal(beside)
	if err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(staged, swapJournal), data, 0o600)
}

// readJournal returns the folders the journal in dir names (none without
// one).
func readJournal(dir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, swapJournal))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var beside []string
	if err := json.Unmarshal(data, &beside); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, swapJournal), err)
	}
	return beside, nil
}

// exists reports whether p exists; an error other than its absence is
// returned.
func exists(p string) (bool, error) {
	_, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// swapFolders puts the staged state in place of dir and of the folders
// beside it, and removes the old ones. A crash at any point leaves
// folders RecoverFolder completes.
func swapFolders(dir string, beside []string) error {
	aside := dir + replacedSuffix
	for _, d := range append([]string{dir}, beside...) {
		if err := os.RemoveAll(d + replacedSuffix); err != nil {
			return err
		}
	}
	err := os.Rename(dir, aside)
	if errors.Is(err, os.ErrNotExist) {
		err = os.Mkdir(aside, 0o700) // no old folder: the mark alone
	}
	if err != nil {
		return err
	}
	// The commit point, durable before any folder beside changes.
	if err := durable.SyncDir(filepath.Dir(dir)); err != nil {
		return err
	}
	return finishSwap(dir, beside)
}

// finishSwap moves each staged folder beside into place, then the staged
// database, and removes what was set aside: the commit point is past.
func finishSwap(dir string, beside []string) error {
	for _, d := range beside {
		if err := swapOne(d); err != nil {
			return err
		}
	}
	if ok, err := exists(dir + stagedSuffix); err != nil {
		return err
	} else if ok {
		if err := os.Rename(dir+stagedSuffix, dir); err != nil {
			return err
		}
		if err := durable.SyncDir(filepath.Dir(dir)); err != nil {
			return err
		}
	}
	return cleanUp(dir, beside)
}

// swapOne puts d's staged folder in its place, d set aside, unless that
// was done (nothing staged).
func swapOne(d string) error {
	staged, err := exists(d + stagedSuffix)
	if err != nil || !staged {
		return err
	}
	if old, err := exists(d); err != nil {
		return err
	} else if old {
		if err := os.RemoveAll(d + replacedSuffix); err != nil {
			return err
		}
		if err := os.Rename(d, d+replacedSuffix); err != nil {
			return err
		}
	}
	if err := os.Rename(d+stagedSuffix, d); err != nil {
		return err
	}
	return durable.SyncDir(filepath.Dir(d))
}

// cleanUp removes, once dir holds the swapped state, what was set aside
// and what is left staged, then the journal: it goes last, so that a
// crash before leaves RecoverFolder the folders to clean.
func cleanUp(dir string, beside []string) error {
	var errs []error
	for _, d := range append([]string{dir}, beside...) {
		errs = append(errs, os.RemoveAll(d+replacedSuffix), os.RemoveAll(d+stagedSuffix))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dir, swapJournal)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// RecoverFolder finishes or undoes, before the store at dir is opened, a
// snapshot's install that a crash cut short, for dir and the folders its
// journal names beside it: with dir in place, what is beside them is
// left over and goes; without it, the adopted state takes their places
// if the swap had begun (dir set aside), else the old folders stay.
// known are folders the caller knows go with dir (its key store, which
// a snapshot unpacks before the journal is written): a copy staged
// beside them goes too when the journal does not name them. Once the
// snapshot's state is in place, the prune of its folder of blobs a crash
// cut short is finished too (prune.go).
func RecoverFolder(dir string, known ...string) error {
	beside, err := readJournal(dir)
	if err == nil && len(beside) == 0 {
		beside, err = readJournal(dir + stagedSuffix)
	}
	if err != nil {
		return fmt.Errorf("recover %s: %w", dir, err)
	}
	for _, d := range known {
		if !slices.Contains(beside, d) {
			beside = append(beside, d)
		}
	}
	inPlace, err := exists(dir)
	if err != nil {
		return err
	}
	begun, err := exists(dir + replacedSuffix)
	if err != nil {
		return err
	}
	if inPlace || !begun {
		// The swap completed, or never began: the old folders stand.
		if err := cleanUp(dir, beside); err != nil {
			return err
		}
	} else if err := finishSwap(dir, beside); err != nil {
		// The old folder is set aside only once the staged one adopted
		// the snapshot: it is complete, and so are the folders beside it.
		return fmt.Errorf("recover %s: %w", dir, err)
	}
	// Before any store opens: nothing to cancel the prune.
	if _, err := finishPrune(context.Background(), dir); err != nil {
		return fmt.Errorf("recover %s: %w", dir, err)
	}
	return nil
}
