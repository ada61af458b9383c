package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

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

var errNoBackups = &httpError{http.StatusServiceUnavailable, CodeNotConfigured, "backups not configured"}

// ShardBackups makes the backups of a cluster node's shards (spec §10 per
// shard, §11): each shard is a database of its own, backed up on the node
// that holds it into <BACKUP_PATH>/shards/<n>/.
type ShardBackups interface {
	// Shard returns shard n's backups when this node holds it.
	Shard(n int) (Backups, bool)
	// Held lists the shards this node holds.
	Held() []int
	// List describes every shard's backups under BACKUP_PATH
	// (backup.ErrNoBackupPath when unset).
	List(ctx context.Context) (backup.Listing, error)
}

// backupsFor picks what a backup request backs up: the database on a
// single node; on a cluster node the shard named by ?shard=N, when this
// node holds it. A shard held elsewhere is its owner's to back up: the
// request is forwarded there and answered, which answered says.
func (s *server) backupsFor(w http.ResponseWriter, r *http.Request) (_ Backups, answered bool, _ error) {
	if s.shardBacks == nil {
		if s.backups == nil {
			return nil, false, errNoBackups
		}
		return s.backups, false, nil
	}
	v := r.URL.Query().Get("shard")
	if v == "" {
		return nil, false, badRequest(CodeInvalidParameter, "a cluster node backs up one shard per request: name it with ?shard=N (this node holds %v)",
			s.shardBacks.Held())
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return nil, false, badRequest(CodeInvalidParameter, "shard %q: want a shard number", v)
	}
	b, ok := s.shardBacks.Shard(n)
	if !ok {
		if s.cluster == nil {
			return nil, false, &httpError{http.StatusConflict, CodeShardNotHeld, fmt.Sprintf(
				"shard %d is not held by this node (it holds %v): ask its owner (GET /admin/cluster)", n, s.shardBacks.Held())}
		}
		return nil, true, s.cluster.ForwardShard(w, r, n)
	}
	return b, false, nil
}

// createBackup answers POST /admin/backups: a backup written into
// BACKUP_PATH, 201 with its manifest; 409 when BACKUP_PATH is unset.
func (s *server) createBackup(w http.ResponseWriter, r *http.Request) error {
	b, answered, err := s.backupsFor(w, r)
	if err != nil || answered {
		return err
	}
	m, _, err := b.CreateInPath(r.Context())
	if errors.Is(err, backup.ErrNoBackupPath) {
		return &httpError{http.StatusConflict, CodeNoBackupPath, err.Error() + ": use POST /admin/backups/stream, or set it"}
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
	var l backup.Listing
	var err error
	switch {
	case s.shardBacks != nil:
		l, err = s.shardBacks.List(r.Context())
	case s.backups != nil:
		l, err = s.backups.List(r.Context())
	default:
		return errNoBackups
	}
	if errors.Is(err, backup.ErrNoBackupPath) {
		return &httpError{http.StatusConflict, CodeNoBackupPath, err.Error()}
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
	b, answered, err := s.backupsFor(w, r)
	if err != nil || answered {
		return err
	}
	compress := false
	switch c := r.URL.Query().Get("compress"); c {
	case "", "none":
	case "zstd":
		compress = true
	default:
		return badRequest(CodeInvalidParameter, "compress %q: want zstd or none", c)
	}
	w.Header().Set("Content-Type", "application/x-tar")
	if compress {
		w.Header().Set("Content-Type", "application/zstd")
	}
	sw := &streamWriter{w: w, rc: http.NewResponseController(w), timeout: s.streamTimeout}
	_, err = b.Write(r.Context(), sw, compress)
	if err != nil && !sw.started {
		w.Header().Del("Content-Type")
		return err
	}
	if err != nil {
		// The backup logged and counted itself (a client that went away
		// is a cancelled backup, not a failed one).
		panic(http.ErrAbortHandler)
	}
	if !sw.started {
		w.WriteHeader(http.StatusOK)
	}
	return nil
}

// errStreamStalled: the client of a streamed backup took nothing for the
// stream timeout.
var errStreamStalled = errors.New("the client took nothing")

// streamWriter writes a backup stream: it notes whether any of the body
// went out, gives every write the stream timeout (a client that stops
// reading is cut, instead of holding the backup open for hours; a slow
// one that keeps reading is not), and tells a client that went away
// (backup.ErrCancelled) from a stalled one.
type streamWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	started bool
}

func (s *streamWriter) Write(p []byte) (int, error) {
	s.started = true
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.timeout)); err != nil {
		return 0, fmt.Errorf("backup stream: %w", err)
	}
	n, err := s.w.Write(p)
	switch {
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = fmt.Errorf("backup stream: %w for %s (PROGRESSDB_BACKUP_STREAM_TIMEOUT): %w", errStreamStalled, s.timeout, err)
	default:
		err = fmt.Errorf("backup stream: %w: %w", backup.ErrCancelled, err)
	}
	return n, err
}
