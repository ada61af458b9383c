package logging

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Sink is where log lines go: stderr, or a file. A file sink can be opened
// again by name (Reopen), so that after logrotate renamed the file, new
// lines go to a new file at the configured path and the renamed one can be
// compressed and removed.
type Sink struct {
	mu   sync.Mutex
	w    io.Writer // stderr, or f
	f    *os.File  // nil for stderr
	path string    // the file sink's path; "" for stderr
}

// openSink returns the sink named by sink ("" or "stderr": stderr).
func openSink(sink string, stderr io.Writer) (*Sink, error) {
	if stderr == nil {
		stderr = io.Discard
	}
	if sink == "" || sink == "stderr" {
		return &Sink{w: stderr}, nil
	}
	path, ok := strings.CutPrefix(sink, "file:")
	if !ok || path == "" {
		return nil, fmt.Errorf("%w: sink %q: must be stderr or file:<path>", ErrInvalidOption, sink)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("log sink folder: %w", err)
	}
	f, err := openLogFile(path)
	if err != nil {
		return nil, err
	}
	return &Sink{w: f, f: f, path: path}, nil
}

func openLogFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("log sink: %w", err)
	}
	return f, nil
}

// Write writes one log line.
func (s *Sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// IsFile reports whether the sink is a file (Reopen has work to do).
func (s *Sink) IsFile() bool { return s.path != "" }

// Reopen opens the file sink's path again and writes there from now on,
// closing the file it wrote to before (SIGHUP after a log rotation). When
// the path cannot be opened, lines keep going to the old file and the
// error says why. A stderr sink has nothing to reopen.
func (s *Sink) Reopen() error {
	if s.path == "" {
		return nil
	}
	f, err := openLogFile(s.path)
	if err != nil {
		return err
	}
	s.mu.Lock()
	old := s.f
	s.w, s.f = f, f
	s.mu.Unlock()
	return old.Close()
}

// Close closes a file sink; closing stderr is left to the process.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.w, s.f = io.Discard, nil
	return err
}
