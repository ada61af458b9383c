package pebbledir

import (
	"io"
	"io/fs"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// What a Pebble folder holds is readable by the server's own user only:
// the folder is created 0700 and every file Pebble creates is 0600,
// whatever the umask (Pebble itself asks for 0755 and 0666).
const (
	DirMode  fs.FileMode = 0o700
	FileMode fs.FileMode = 0o600
)

// privateFS is Pebble's file system with the modes above: every method
// that can create a file or folder sets its mode explicitly.
type privateFS struct{ vfs.FS }

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
	if err := os.Chmod(name, FileMode); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// MkdirAll creates missing folders 0700; it leaves existing ones alone.
func (p privateFS) MkdirAll(dir string, _ os.FileMode) error {
	return p.FS.MkdirAll(dir, DirMode)
}

// private sets the mode of a file just opened for writing.
func private(f vfs.File, err error) func(name string) (vfs.File, error) {
	return func(name string) (vfs.File, error) {
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(name, FileMode); err != nil {
			_ = f.Close()
			return nil, err
		}
		return f, nil
	}
}
