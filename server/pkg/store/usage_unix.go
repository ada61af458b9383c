//go:build linux || darwin || freebsd || netbsd || openbsd

package store

import "syscall"

// volumeSpace returns the bytes available to this user and the size of the
// file system holding path.
func volumeSpace(path string) (free, size uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	bs := uint64(st.Bsize)
	return uint64(st.Bavail) * bs, uint64(st.Blocks) * bs, nil
}
