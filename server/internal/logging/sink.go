package logging

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// openSink returns the writer for sink and what closes it.
func openSink(sink string, stderr io.Writer) (io.Writer, io.Closer, error) {
	if stderr == nil {
		stderr = io.Discard
	}
	if sink == "" || sink == "stderr" {
		return stderr, nopCloser{}, nil
	}
	path, ok := strings.CutPrefix(sink, "file:")
	if !ok || path == "" {
		return nil, nil, fmt.Errorf("%w: sink %q: must be stderr or file:<path>", ErrInvalidOption, sink)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, nil, fmt.Errorf("log sink folder: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, nil, fmt.Errorf("log sink: %w", err)
	}
	return f, f, nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }
