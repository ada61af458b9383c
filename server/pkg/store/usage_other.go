//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package store

import "errors"

// volumeSpace is not implemented on this platform.
func volumeSpace(string) (free, size uint64, err error) {
	return 0, 0, errors.New("not supported on this platform")
}
