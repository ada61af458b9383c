// Package logging builds the server's slog.Logger from the configured level,
// format and sink: tint text for people at a terminal, JSON for machines.
package logging

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/lmittmann/tint"
	"github.com/mattn/go-isatty"
)

// ErrInvalidOption is wrapped by New's errors for a bad level, format or sink.
var ErrInvalidOption = errors.New("invalid logging option")

// Options select the logger. Values are those of PROGRESSDB_LOG_LEVEL,
// PROGRESSDB_LOG_FORMAT and PROGRESSDB_LOG_SINK; empty means the default
// (info, auto, stderr).
type Options struct {
	Level  string // debug|info|warn|error
	Format string // text|json|auto
	Sink   string // stderr|file:<path>
	// Stderr is where the stderr sink writes; io.Discard when nil.
	Stderr io.Writer
}

// New returns the logger and its sink, which the caller closes when done
// (a no-op for stderr) and reopens after a log rotation. Record times are
// written in UTC.
func New(opts Options) (*slog.Logger, *Sink, error) {
	level, err := ParseLevel(opts.Level)
	if err != nil {
		return nil, nil, err
	}
	sink, err := openSink(opts.Sink, opts.Stderr)
	if err != nil {
		return nil, nil, err
	}
	// The format follows what the sink writes to first: a terminal, or
	// not. A file opened again by Reopen is never one.
	h, err := newHandler(opts.Format, sink, IsTerminal(sink.w), level)
	if err != nil {
		sink.Close()
		return nil, nil, err
	}
	return slog.New(h), sink, nil
}

// ParseLevel reads debug, info, warn or error (any case); "" is info.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%w: level %q: must be debug, info, warn or error", ErrInvalidOption, s)
}

func newHandler(format string, w io.Writer, tty bool, level slog.Level) (slog.Handler, error) {
	switch format {
	case "", "auto":
		if tty {
			format = "text"
		} else {
			format = "json"
		}
	case "text", "json":
	default:
		return nil, fmt.Errorf("%w: format %q: must be text, json or auto", ErrInvalidOption, format)
	}
	if format == "json" {
		return slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: replaceAttr}), nil
	}
	return tint.NewTextHandler(w, &tint.Options{
		Level:       level,
		ReplaceAttr: replaceAttr,
		TimeFormat:  "2006-01-02T15:04:05.000Z07:00",
		NoColor:     !tty, // escape codes only where a person reads them
	}), nil
}

// replaceAttr writes the record time in UTC, so every sink agrees with the
// audit files and the API whatever the machine's zone, and every duration
// as milliseconds (see durationMS).
func replaceAttr(groups []string, a slog.Attr) slog.Attr {
	switch {
	case len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime:
		return slog.Time(slog.TimeKey, a.Value.Time().UTC())
	case a.Value.Kind() == slog.KindDuration:
		return durationMS(a.Key, a.Value.Duration())
	}
	return a
}

// durationMS is how every log line gives a duration: a number of
// milliseconds (to the microsecond) under the key with "_ms" added, as the
// audit footer's duration_ms and erase_ms and the lines that log them do.
// slog's own JSON form, bare nanoseconds under the plain key, reads as
// neither a duration nor a unit, and a string like "1.5s" cannot be
// compared or summed by log tooling.
func durationMS(key string, d time.Duration) slog.Attr {
	if !strings.HasSuffix(key, "_ms") {
		key += "_ms"
	}
	return slog.Float64(key, float64(d.Round(time.Microsecond))/float64(time.Millisecond))
}

// IsTerminal reports whether w is a terminal: an *os.File, or a writer
// wrapping one that tells its descriptor (Fd), can be.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	fd := f.Fd()
	return isatty.IsTerminal(fd) || isatty.IsCygwinTerminal(fd)
}
