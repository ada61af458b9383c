package store

import (
	"io"
	"io/fs"
	"log/slog"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Chat content is readable by the server's own user only: the database
// folder is created 0700 and every file Pebble creates is 0600, whatever
// the umask (Pebble itself asks for 0755 and 0666).
const (
	dbDirMode  fs.FileMode = 0o700
	dbFileMode fs.FileMode = 0o600
)

// privateFS is Pebble's file system with the modes above: every method
// that can create a file or folder sets its mode explicitly.
type privateFS struct{ vfs.FS }

// PrivateFS is fs with the modes above, for Pebble's other folder (the
// key store, whose wrapped keys are as private as the content they seal).
func PrivateFS(fs vfs.FS) vfs.FS { return privateFS{fs} }

func (p privateFS) Unwrap() vfs.FS { return p.FS }

func (p privateFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return private(p.FS.Create(name, category))(name)
}

func (p privateFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return private(p.FS.OpenReadWrite(name, category, opts...))(name)
}

func (p privateFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return private(p.FS.ReuseForWrite(oldname, newname, category))(newname)
}

func (p privateFS) Lock(name string) (io.Closer, error) {
	c, err := p.FS.Lock(name)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(name, dbFileMode); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// MkdirAll creates missing folders 0700; it leaves existing ones alone
// (Open warns about an open one instead).
func (p privateFS) MkdirAll(dir string, _ os.FileMode) error {
	return p.FS.MkdirAll(dir, dbDirMode)
}

// private sets the mode of a file just opened for writing.
func private(f vfs.File, err error) func(name string) (vfs.File, error) {
	return func(name string) (vfs.File, error) {
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(name, dbFileMode); err != nil {
			_ = f.Close()
			return nil, err
		}
		return f, nil
	}
}

// warnIfOpen logs a warning when an existing database folder can be read
// by the group or by others: its files hold every message.
func warnIfOpen(log *slog.Logger, dir string) {
	info, err := os.Stat(dir)
	if err != nil || log == nil || info.Mode().Perm()&0o044 == 0 {
		return
	}
	log.Warn("db_folder_readable_by_others", "path", dir, "mode", info.Mode().Perm().String(),
		"fix", "chmod 700 "+dir)
}
