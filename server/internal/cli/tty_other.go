//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package cli

// isTerminalFd is false where terminals cannot be told apart.
func isTerminalFd(int) bool { return false }
