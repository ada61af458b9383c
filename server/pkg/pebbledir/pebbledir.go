// Package pebbledir holds what every Pebble folder of the server needs,
// the data store's and the key store's alike: opening one private to the
// server's user with Pebble's messages in the log and its fatal errors
// stopping the process, and the staging folders of its checkpoints.
package pebbledir

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/progressdb/progressdb/server/pkg/erase"
)

// Options configure Open. The zero value opens with Pebble's defaults,
// its messages dropped, and a fatal error logged nowhere but stderr.
type Options struct {
	// Logger receives Pebble's messages: routine ones at debug level,
	// errors under ErrorEvent. Nil drops them, since Pebble's default
	// writes to the process-wide log package.
	Logger *slog.Logger
	// ErrorEvent names Pebble's error lines ("pebble_error" when empty).
	ErrorEvent string
	// Fatal is called when Pebble meets an error it cannot continue from
	// (a failed log write or sync, a failed manifest write, corruption).
	// It must not return. Nil: Stop, with Logger.
	Fatal func(detail string)
	// MemTableSize, CacheSize and Cache are Pebble's options of those
	// names (zero: Pebble's defaults; Cache, when set, instead of
	// CacheSize).
	MemTableSize uint64
	CacheSize    int64
	Cache        *pebble.Cache
	// MustExist fails with pebble.ErrDBDoesNotExist when there is no
	// database at path (Pebble may still create the folder and its lock
	// file first).
	MustExist bool
	// OnLogSync, when set, is called as each sync of a log file begins
	// (logSyncFS). It must be quick: the log's writer waits for it.
	OnLogSync func()
}

// Open opens (creating if needed) the Pebble folder at path: created 0700
// and every file in it 0600 (privateFS), log files never recycled (the
// erase step needs old logs gone, package erase). A folder another
// process holds fails with an error IsLocked recognises.
//
// Both stores stop the process on a fatal error rather than recover:
// Pebble reports one by panicking with its commit mutex held, so a
// process that recovered would hang every later write of that folder,
// and for the key store every sealed write of the data store with it;
// stopping lets a supervisor restart it on a sane disk.
func Open(path string, o Options) (*pebble.DB, error) {
	event := o.ErrorEvent
	if event == "" {
		event = "pebble_error"
	}
	fatal := o.Fatal
	if fatal == nil {
		fatal = func(detail string) { Stop(o.Logger, detail) }
	}
	var fs vfs.FS = erase.NoRecycleFS{FS: privateFS{vfs.Default}}
	if o.OnLogSync != nil {
		fs = logSyncFS{FS: fs, onSync: o.OnLogSync}
	}
	return pebble.Open(path, &pebble.Options{
		FS:               fs,
		Logger:           logger{l: o.Logger, event: event, fatal: fatal},
		MemTableSize:     o.MemTableSize,
		CacheSize:        o.CacheSize,
		Cache:            o.Cache,
		ErrorIfNotExists: o.MustExist,
	})
}

// Stop logs storage_fatal and exits the process with status 1: the
// handling of a fatal storage error (Options.Fatal).
func Stop(log *slog.Logger, detail string) {
	if log != nil {
		log.Error("storage_fatal", "detail", detail, "action", "exit")
	} else {
		fmt.Fprintf(os.Stderr, "progressdb: fatal storage error, exiting: %s\n", detail)
	}
	os.Exit(1)
}

// IsLocked tells Pebble's "the folder's lock is taken" from other open
// errors: fcntl answers EAGAIN or EACCES (a bare errno; failing to create
// the lock file is a *PathError instead), and a second open in this
// process is refused by Pebble itself.
func IsLocked(err error) bool {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return false
	}
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) {
		return true
	}
	return err != nil && strings.Contains(err.Error(), "lock held by current process")
}

// logger sends Pebble's messages to slog.
type logger struct {
	l     *slog.Logger
	event string
	fatal func(string)
}

// Infof logs at debug level: Pebble's routine messages (log replay at
// every open, compactions) would otherwise fill every command's output.
func (p logger) Infof(format string, args ...any) {
	if p.l != nil {
		p.l.Debug("pebble", "detail", fmt.Sprintf(format, args...))
	}
}

func (p logger) Errorf(format string, args ...any) {
	if p.l != nil {
		p.l.Error(p.event, "detail", fmt.Sprintf(format, args...))
	}
}

// Fatalf is called on errors Pebble cannot continue from; it must not
// return.
func (p logger) Fatalf(format string, args ...any) {
	p.fatal(fmt.Sprintf(format, args...))
}

// OpenReadOnly opens a copy (a backup's, a restore's) read-only: it
// changes nothing but Pebble's lock file, and fails when no database is
// there. Pebble's messages are dropped, and a fatal one panics instead of
// stopping the process: a damaged copy is a finding about the copy, so a
// caller that reads one recovers the panic and reports it.
func OpenReadOnly(dir string) (*pebble.DB, error) {
	return pebble.Open(dir, &pebble.Options{
		ReadOnly:         true,
		FS:               vfs.Default,
		Logger:           copyLogger{},
		ErrorIfNotExists: true,
	})
}

// copyLogger drops Pebble's messages about a read-only copy; a fatal one
// panics (OpenReadOnly).
type copyLogger struct{}

func (copyLogger) Infof(string, ...any)  {}
func (copyLogger) Errorf(string, ...any) {}
func (copyLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
