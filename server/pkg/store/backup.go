package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/pebbledir"
)

// auditHeadKey holds the last audit run whose purges this database
// reflects (spec §10). A backup copies it with the data, so a database
// restored from a backup, or copied back by hand, knows which purges of
// the audit trail it still lacks.
const auditHeadKey = "sys:audit:head"

// databaseIDKey holds the database's identity: made once, carried by its
// backups and copies. Audit headers name it, so that the runs of other
// databases sharing an audit trail are told from this one's.
const databaseIDKey = "sys:db:id"

// runStartedKey holds the ID of the last run that began purging this
// database: its purges are in the database as far as they went (a run
// killed part way leaves markers the next run finishes), even when the
// run never recorded itself as the head.
const runStartedKey = "sys:audit:started"

// AuditHead names an audit file: its run, its path under the audit root
// and the hex SHA-256 of its footer line (what the next file's prev_file
// holds). The zero value is "before the first file".
type AuditHead struct {
	RunID  string `json:"run_id"`
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
}

// AuditHead returns the recorded head; ok is false when the database has
// none (written before heads existed).
func (s *Store) AuditHead(ctx context.Context) (AuditHead, bool, error) {
	if err := ctx.Err(); err != nil {
		return AuditHead{}, false, err
	}
	return readAuditHead(s.db)
}

func readAuditHead(r pebble.Reader) (AuditHead, bool, error) {
	v, err := getFrom(r, []byte(auditHeadKey))
	switch {
	case errors.Is(err, ErrNotFound):
		return AuditHead{}, false, nil
	case err != nil:
		return AuditHead{}, false, err
	}
	var h AuditHead
	if err := json.Unmarshal(v, &h); err != nil {
		return AuditHead{}, false, fmt.Errorf("%w: audit head: %w", ErrMalformed, err)
	}
	return h, true, nil
}

// SetAuditHead records h, synced.
func (s *Store) SetAuditHead(ctx context.Context, h AuditHead) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	v, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := s.set(ctx, []byte(auditHeadKey), v, true); err != nil {
		return fmt.Errorf("record audit head: %w", err)
	}
	return nil
}

// initBackupState records a new database's identity and its head before
// the first audit file.
func (s *Store) initBackupState(ctx context.Context) error {
	head, err := json.Marshal(AuditHead{})
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	_ = b.Set([]byte(databaseIDKey), []byte(newDatabaseID()), nil)
	_ = b.Set([]byte(auditHeadKey), head, nil)
	if err := s.apply(ctx, write{kind: writeState, batch: b}); err != nil {
		return fmt.Errorf("record database id: %w", err)
	}
	return nil
}

// NewDatabaseID returns a new identity for SetDatabaseID.
func NewDatabaseID() string { return newDatabaseID() }

// SetDatabaseID records the database's identity when it has none yet.
// Not synced on its own (see SetRunStarted).
func (s *Store) SetDatabaseID(ctx context.Context, id string) error {
	cur, err := s.DatabaseID(ctx, false)
	if err != nil || cur != "" {
		return err
	}
	if err := s.set(ctx, []byte(databaseIDKey), []byte(id), false); err != nil {
		return fmt.Errorf("record database id: %w", err)
	}
	return s.recordIdentity(ctx)
}

// DatabaseID returns the database's identity; when it has none (a
// database written before identities existed) it makes one if create is
// set, else returns "".
func (s *Store) DatabaseID(ctx context.Context, create bool) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	v, err := s.get([]byte(databaseIDKey))
	switch {
	case err == nil:
		return string(v), nil
	case !errors.Is(err, ErrNotFound):
		return "", err
	case !create:
		return "", nil
	}
	id := newDatabaseID()
	if err := s.set(ctx, []byte(databaseIDKey), []byte(id), true); err != nil {
		return "", fmt.Errorf("record database id: %w", err)
	}
	return id, s.recordIdentity(ctx)
}

func newDatabaseID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RunStarted returns the ID of the last run that began purging the
// database ("" when none did).
func (s *Store) RunStarted(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	v, err := s.get([]byte(runStartedKey))
	if errors.Is(err, ErrNotFound) {
		return "", nil
	}
	return string(v), err
}

// SetRunStarted records that run id begins purging. Not synced on its
// own: the purge's deletes follow it in the log, so none survives a crash
// without it.
func (s *Store) SetRunStarted(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.set(ctx, []byte(runStartedKey), []byte(id), false); err != nil {
		return fmt.Errorf("record run start: %w", err)
	}
	return nil
}

// Checkpoint writes a consistent copy of the database (Pebble checkpoint,
// log synced first, so every write acknowledged before the call is in it)
// into a new staging folder inside the database folder and returns its
// path. Tables are hard-linked: the caller must remove the folder as soon
// as it has opened its files (RemoveCheckpoint). While a staging folder
// is there, Erase waits for it (pebbledir.HasCheckpoints): it holds the database as it
// was before a purge, in a copied log and in tables the compactions
// replace, and an erase must not say "erased" while anything under the
// database folder still holds purged content. Open removes folders a
// killed process left.
func (s *Store) Checkpoint(ctx context.Context, name string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.checkpoints.Add(1)
	dir, err := pebbledir.Checkpoint(s.db, s.path, name)
	if errors.Is(err, pebbledir.ErrCheckpointName) {
		return "", fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	return dir, nil
}

// Checkpoints counts the checkpoints begun on this store since it
// opened. A replicated shard's snapshot is one, taken while the group
// applies nothing: an upload that sees the count change while its bytes
// went through the log re-sends them (attachments), for a follower the
// snapshot left without the earlier ones.
func (s *Store) Checkpoints() uint64 { return s.checkpoints.Load() }

// Logger is the store's logger (Options.Logger; a discarding one without).
func (s *Store) Logger() *slog.Logger {
	if s.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.log
}

// RemoveCheckpoint removes a staging folder made by Checkpoint. Call it
// once for each.
func (s *Store) RemoveCheckpoint(dir string) error {
	err := pebbledir.RemoveCheckpoint(s.path, dir)
	if errors.Is(err, pebbledir.ErrNotCheckpoint) {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return err
}

// BeginReplayPurge claims an item whose purge the audit trail records, on
// a database restored from before it (spec §10): the purge happened, so
// the item goes whatever its state here. A live item is first soft-deleted
// through the ordinary delete, which keeps every index right, so that the
// purge primitives find it as they find any deleted item; then the marker
// is written, Replayed set, DeletedTS as stored. An item that is gone
// answers ErrNotFound. Repeating it after a crash is harmless.
func (s *Store) BeginReplayPurge(ctx context.Context, m PurgeMarker) (PurgeMarker, error) {
	if err := checkKind(m.Kind); err != nil {
		return m, err
	}
	if m.Kind == KindThread {
		m.ThreadID = m.ID
	}
	if err := validateIDs(m.ID, m.ThreadID); err != nil {
		return m, err
	}
	m.Replayed = true
	ctx = context.WithValue(ctx, replayWriteKey{}, true)
	var err error
	if m.Kind == KindThread {
		var t Thread
		t, err = s.DeleteThread(ctx, m.ID)
		m.DeletedTS = t.DeletedTS
	} else {
		var msg Message
		msg, err = s.DeleteMessage(ctx, m.ThreadID, m.ID)
		m.DeletedTS = msg.DeletedTS
		if errors.Is(err, ErrUnreadable) {
			return s.claimUnreadable(ctx, m)
		}
	}
	if errors.Is(err, ErrNotFound) {
		// Its record is gone but keys may be left (a purge cut short
		// before this backup): the purge finishes what is there.
		exists, xerr := s.ItemExists(ctx, m.Kind, m.ID)
		if xerr != nil {
			return m, xerr
		}
		if exists {
			err = nil
		}
	}
	if err != nil {
		return m, fmt.Errorf("replay purge of %s %s: %w", m.Kind, m.ID, err)
	}
	h := s.hold(m.ThreadID)
	defer h.release()
	if m.StartedAt == 0 {
		m.StartedAt = s.now().UnixNano()
	}
	v, err := encode(m)
	if err != nil {
		return m, err
	}
	// Not synced on its own, as BeginPurge: the deletes follow it in the log.
	if err := s.setUnder(ctx, h, purgeKey(m.Kind, m.ID), v, false); err != nil {
		return m, fmt.Errorf("replay purge of %s %s: %w", m.Kind, m.ID, err)
	}
	return m, nil
}

// claimUnreadable claims for a replayed purge a message whose key is gone
// (a subject erasure replayed where the key store already lost the
// author's key): no tombstone can be sealed for it, so it is taken as a
// subject claim takes a message, marker and live indexes in one batch.
func (s *Store) claimUnreadable(ctx context.Context, m PurgeMarker) (PurgeMarker, error) {
	h := s.hold(m.ThreadID)
	defer h.release()
	msg, err := s.readMessage(m.ThreadID, m.ID)
	if err != nil {
		return m, fmt.Errorf("replay purge of %s %s: %w", m.Kind, m.ID, err)
	}
	claimed, err := s.purgeStarted(KindMessage, m.ID)
	if err != nil {
		return m, err
	}
	m, err = s.writeClaim(ctx, h, m, msg, !msg.Deleted && !claimed)
	if err != nil {
		return m, fmt.Errorf("replay purge of %s %s: %w", m.Kind, m.ID, err)
	}
	return m, nil
}

// replayWriteKey marks the context of a replayed purge's soft delete
// (writeReplay, commit.go).
type replayWriteKey struct{}

func replayWrite(ctx context.Context) bool { return ctx.Value(replayWriteKey{}) != nil }

// DirStats is what Inspect finds in a database folder.
type DirStats struct {
	Threads  int64 // thread records, deleted ones included
	Messages int64 // messages (entries of thread logs), deleted ones included
	// Erased is the database's erase marker: nothing purged is left to
	// erase (docs/erasure.md).
	Erased bool
	// Head is the last audit run whose purges the database reflects;
	// HasHead is false when it records none.
	Head    AuditHead
	HasHead bool
	// PebbleFormat is Pebble's format major version of the files.
	PebbleFormat uint64
}

// Inspect opens the database at dir read-only (writing nothing but
// Pebble's lock file), runs Pebble's consistency check over every level
// (every block read and its checksum verified, keys in order, range
// deletions well formed) and counts its threads and messages.
func Inspect(ctx context.Context, dir string) (DirStats, error) { return inspect(ctx, dir, true) }

// Count is Inspect without the consistency check: it reads the thread
// keys only (a backup's manifest; verify checks the copy).
func Count(ctx context.Context, dir string) (DirStats, error) { return inspect(ctx, dir, false) }

func inspect(ctx context.Context, dir string, check bool) (st DirStats, err error) {
	defer func() {
		// A damaged copy can make Pebble give up (pebbledir.OpenReadOnly):
		// that is a finding about the copy, not a reason to stop.
		if p := recover(); p != nil {
			err = fmt.Errorf("inspect %s: %v", dir, p)
		}
	}()
	db, err := pebbledir.OpenReadOnly(dir)
	if err != nil {
		return st, fmt.Errorf("inspect %s: open: %w", dir, err)
	}
	defer db.Close()
	st.PebbleFormat = uint64(db.FormatMajorVersion())
	if check {
		if err := db.CheckLevels(nil); err != nil {
			return st, fmt.Errorf("inspect %s: consistency check: %w", dir, err)
		}
	}
	if st.Erased, err = hasKey(db, []byte(eraseKey)); err != nil {
		return st, fmt.Errorf("inspect %s: %w", dir, err)
	}
	if st.Head, st.HasHead, err = readAuditHead(db); err != nil {
		return st, fmt.Errorf("inspect %s: %w", dir, err)
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(threadNS), UpperBound: upperBound([]byte(threadNS))})
	if err != nil {
		return st, fmt.Errorf("inspect %s: %w", dir, err)
	}
	defer it.Close()
	for valid := it.First(); valid; valid = it.Next() {
		if st.Threads&0xfff == 0 {
			if err := ctx.Err(); err != nil {
				return st, err
			}
		}
		_, rest, ok := parseThreadKey(it.Key())
		switch {
		case !ok:
		case bytes.Equal(rest, []byte(metaSuffix)):
			st.Threads++
		case bytes.HasPrefix(rest, []byte(logSuffix)):
			st.Messages++
		}
	}
	if err := it.Error(); err != nil {
		return st, fmt.Errorf("inspect %s: %w", dir, err)
	}
	return st, nil
}
