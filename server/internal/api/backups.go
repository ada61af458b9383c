package api

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/progressdb/progressdb/server/internal/backup"
)

// Backups makes backups of the served database (spec §10 admin API).
type Backups interface {
	// CreateInPath writes a backup into BACKUP_PATH
	// (backup.ErrNoBackupPath when unset).
	CreateInPath(ctx context.Context) (backup.Manifest, string, error)
	// Write streams a backup, zstd-compressed when compress is set.
	Write(ctx context.Context, w io.Writer, compress bool) (backup.Manifest, error)
	// List describes the backups in BACKUP_PATH
	// (backup.ErrNoBackupPath when unset).
	List(ctx context.Context) (backup.Listing, error)
}

var errNoBackups = &httpError{http.StatusServiceUnavailable, "backups not configured"}

// createBackup answers POST /admin/backups: a backup written into
// BACKUP_PATH, 201 with its manifest; 409 when BACKUP_PATH is unset.
func (s *server) createBackup(w http.ResponseWriter, r *http.Request) error {
	if s.backups == nil {
		return errNoBackups
	}
	m, _, err := s.backups.CreateInPath(r.Context())
	if errors.Is(err, backup.ErrNoBackupPath) {
		return &httpError{http.StatusConflict, err.Error() + ": use POST /admin/backups/stream, or set it"}
	}
	if err != nil {
		return err
	}
	return s.writeJSON(w, r, http.StatusCreated, m)
}

// listBackups answers GET /admin/backups: the backups in BACKUP_PATH with
// their age, expiry, size and the purged items each still holds; 409
// when BACKUP_PATH is unset.
func (s *server) listBackups(w http.ResponseWriter, r *http.Request) error {
	if s.backups == nil {
		return errNoBackups
	}
	l, err := s.backups.List(r.Context())
	if errors.Is(err, backup.ErrNoBackupPath) {
		return &httpError{http.StatusConflict, err.Error()}
	}
	if err != nil {
		return err
	}
	return s.writeJSON(w, r, http.StatusOK, l)
}

// streamBackup answers POST /admin/backups/stream: the archive itself as
// the body (?compress=zstd for a .tar.zst stream). The status is sent
// before the archive is complete: a backup that fails part way breaks the
// connection, so no client can take a cut archive for a whole one.
func (s *server) streamBackup(w http.ResponseWriter, r *http.Request) error {
	if s.backups == nil {
		return errNoBackups
	}
	compress := false
	switch c := r.URL.Query().Get("compress"); c {
	case "", "none":
	case "zstd":
		compress = true
	default:
		return badRequest("compress %q: want zstd or none", c)
	}
	w.Header().Set("Content-Type", "application/x-tar")
	if compress {
		w.Header().Set("Content-Type", "application/zstd")
	}
	sw := &startWriter{w: w}
	_, err := s.backups.Write(r.Context(), sw, compress)
	if err != nil && !sw.started {
		w.Header().Del("Content-Type")
		return err
	}
	if err != nil {
		s.log.Error("backup_stream_failed", "err", err)
		panic(http.ErrAbortHandler)
	}
	if !sw.started {
		w.WriteHeader(http.StatusOK)
	}
	return nil
}

// startWriter notes whether any of the body went out.
type startWriter struct {
	w       http.ResponseWriter
	started bool
}

func (s *startWriter) Write(p []byte) (int, error) {
	s.started = true
	return s.w.Write(p)
}
