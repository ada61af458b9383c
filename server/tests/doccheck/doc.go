// Package doccheck holds no code: its tests check the documentation
// against the repository it describes. The pages' references name pages
// that exist, and the shell blocks a reader copies run as written, under
// the shell they are marked for (`sh` is POSIX sh: dash on Debian).
package doccheck
