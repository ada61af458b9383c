// Package durable writes files so that a crash leaves either the old
// content or the new, never part of either: a file is written aside,
// synced, renamed into place, and its folder synced so the rename lasts.
// It depends on the standard library alone, so that the audit package,
// which has no other dependency, can use it too.
package durable

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// SyncDir makes the entries of dir (creations, renames, removals) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync folder %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync folder %s: %w", dir, err)
	}
	return nil
}

// WriteFile replaces path with data, with mode perm (less the umask).
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write replaces path with what fill writes: into a new temporary file
// beside it (mode perm, less the umask), synced, renamed over path,
// folder synced. On failure the temporary file is removed; a killed
// process leaves only it, under a name starting with "." and ending in
// ".tmp-" and random hex, never a partial file under path. rename(2)
// replaces a symbolic link at path rather than following it.
func Write(path string, perm fs.FileMode, fill func(io.Writer) error) error {
	return write(path, perm, true, fill)
}

// WriteNew is Write that never replaces a file: when path exists once the
// content is complete it fails with an error wrapping fs.ErrExist and
// removes what it wrote. The file is put in place with a hard link, which
// fails when the name is taken, so a file made meanwhile is not lost.
func WriteNew(path string, perm fs.FileMode, fill func(io.Writer) error) error {
	return write(path, perm, false, fill)
}

func write(path string, perm fs.FileMode, replace bool, fill func(io.Writer) error) (err error) {
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp := filepath.Join(dir, "."+filepath.Base(path)+".tmp-"+hex.EncodeToString(suffix[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err := fill(f); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if replace {
		err = os.Rename(tmp, path)
	} else if err = os.Link(tmp, path); err == nil {
		err = os.Remove(tmp)
	} else if errors.Is(err, fs.ErrExist) {
		err = fmt.Errorf("%s: %w", path, fs.ErrExist)
	}
	if err != nil {
		return err
	}
	return SyncDir(dir)
}
