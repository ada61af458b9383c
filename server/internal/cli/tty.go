package cli

import (
	"io"
	"os"
)

// isTerminal reports whether w is a terminal: a binary archive written
// there is garbage on the screen, not a backup.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminalFd(int(f.Fd()))
}
