package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/durable"
	"github.com/progressdb/progressdb/server/pkg/pebbledir"
)

// A restore has three states: unpacked (files being put in place),
// replaying (the files are there, the purges the audit trail records
// after the backup's head are not yet repeated) and done. Only a done
// restore may be served (spec §10.1). The state lives in a marker file in
// the database folder, which Open reads before it opens anything, so no
// command serves or changes a restore that has not finished; the restore
// that finishes it opens the store with Options.Restoring.

// RestoreMarker is the marker file of a restore that has not finished.
const RestoreMarker = ".progressdb-restore-unfinished"

// States of an unfinished restore (RestoreState.State).
const (
	// RestoreUnpacking: the backup's files are being put in place; what
	// the folder holds is not a database yet.
	RestoreUnpacking = "unpacking"
	// RestoreReplaying: every file is in place and synced; the replay of
	// the purges after the backup's head has not completed.
	RestoreReplaying = "replaying"
)

// ErrRestoreUnfinished: the folder holds a restore that has not finished.
var ErrRestoreUnfinished = errors.New("an unfinished restore")

// RestoreState is what the marker records.
type RestoreState struct {
	State string `json:"state"`
	// Backup is the archive restored; BackupID its manifest's ID (known
	// once unpacked).
	Backup   string `json:"backup,omitempty"`
	BackupID string `json:"backup_id,omitempty"`
	// DatabaseID is the restored database's new identity (BecomeCopy).
	DatabaseID string `json:"database_id,omitempty"`
	// Audit is the trail the replay reads and where the copy keeps its own.
	Audit string `json:"audit,omitempty"`
	// KeyStore is the folder the backup's key store was restored into
	// (sealed content, spec §12): the replay destroys keys there.
	KeyStore string `json:"keystore,omitempty"`
	// Attachments is the folder of the copy's attachments (a file://
	// store's blobs restored there): the replay deletes blobs there.
	Attachments string `json:"attachments,omitempty"`
}

// UnfinishedRestoreError names an unfinished restore and how to finish it.
type UnfinishedRestoreError struct {
	Dir   string
	State RestoreState
}

func (e *UnfinishedRestoreError) Error() string {
	if e.State.State == RestoreReplaying {
		return fmt.Sprintf("%v at %s (backup %s): its purge replay has not finished, and nothing serves it until it does; "+
			"finish it with 'progressdb restore --resume --db %s' (add --accept-broken-audit to replay what a trail "+
			"that does not verify still shows)", ErrRestoreUnfinished, e.Dir, orUnknown(e.State.BackupID), e.Dir)
	}
	return fmt.Sprintf("%v at %s: it was cut short while unpacking %s, and the folder is not a database; "+
		"remove the folder and restore again", ErrRestoreUnfinished, e.Dir, orUnknown(e.State.Backup))
}

func (e *UnfinishedRestoreError) Unwrap() error { return ErrRestoreUnfinished }

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// ReadRestoreState returns the state of the unfinished restore in dir; ok
// is false when dir holds none. A marker that cannot be parsed (a
// restore killed while writing it, or one from before states) is a
// restore cut short while unpacking.
func ReadRestoreState(dir string) (st RestoreState, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, RestoreMarker))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return st, false, nil
	case err != nil:
		return st, false, fmt.Errorf("read the restore marker: %w", err)
	}
	if json.Unmarshal(data, &st) != nil || st.State != RestoreReplaying {
		st.State = RestoreUnpacking
	}
	return st, true, nil
}

// CheckRestored returns an *UnfinishedRestoreError when dir holds a
// restore that has not finished, nil otherwise.
func CheckRestored(dir string) error {
	st, ok, err := ReadRestoreState(dir)
	switch {
	case err != nil:
		return err
	case ok:
		return &UnfinishedRestoreError{Dir: dir, State: st}
	}
	return nil
}

// WriteRestoreState records st in dir's marker: written beside it, synced,
// renamed over it and the folder synced, so a crash leaves the old state
// or the new one.
func WriteRestoreState(dir string, st RestoreState) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := durable.WriteFile(filepath.Join(dir, RestoreMarker), append(data, '\n'), pebbledir.FileMode); err != nil {
		return fmt.Errorf("write the restore marker: %w", err)
	}
	return nil
}

// FinishRestore removes dir's marker, synced: the restore is done.
func FinishRestore(dir string) error {
	if err := os.Remove(filepath.Join(dir, RestoreMarker)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("finish the restore: %w", err)
	}
	return durable.SyncDir(dir)
}

// lineageKey holds where a restored database came from.
const lineageKey = "sys:db:lineage"

// Lineage is where a database restored from a backup came from (spec
// §10.1): a copy is a database of its own, with its own identity, that
// knows its origin. The runs of its origin (and of the origin's own
// origins) recorded after the backup's head are purges it lacks; the runs
// of any other database sharing the trail are not, and its own runs are
// never taken for its origin's.
type Lineage struct {
	// OriginID is the identity of the database the backup was taken of.
	OriginID string `json:"origin_id"`
	// OriginHead is the backup's audit head: the last run of the origin
	// the copy reflects.
	OriginHead AuditHead `json:"origin_head"`
	BackupID   string    `json:"backup_id"`
	// Ancestors are the identities the database descends from, its origin
	// first, then the origin's origin, and so on.
	Ancestors []string `json:"ancestors"`
}

// Lineage returns the database's lineage; ok is false for a database that
// is no copy.
func (s *Store) Lineage(ctx context.Context) (l Lineage, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return l, false, err
	}
	return readLineage(s.db)
}

func readLineage(r pebble.Reader) (l Lineage, ok bool, err error) {
	v, err := getFrom(r, []byte(lineageKey))
	switch {
	case errors.Is(err, ErrNotFound):
		return l, false, nil
	case err != nil:
		return l, false, err
	}
	if err := json.Unmarshal(v, &l); err != nil {
		return l, false, fmt.Errorf("%w: lineage: %w", ErrMalformed, err)
	}
	return l, true, nil
}

// BecomeCopy gives a database just restored from backup backupID its new
// identity id and records its lineage: the identity it had (the backup's
// origin), the head it reflects, and the origin's own ancestors. It is
// done once: a database whose identity is already id is left as it is,
// so a restore resumed after a crash can repeat it. Synced.
func (s *Store) BecomeCopy(ctx context.Context, id, backupID string) (Lineage, error) {
	if id == "" {
		return Lineage{}, fmt.Errorf("%w: empty database id", ErrInvalidArgument)
	}
	origin, err := s.DatabaseID(ctx, false)
	if err != nil {
		return Lineage{}, err
	}
	prev, _, err := s.Lineage(ctx)
	if err != nil {
		return Lineage{}, err
	}
	if origin == id {
		return prev, nil
	}
	head, _, err := s.AuditHead(ctx)
	if err != nil {
		return Lineage{}, err
	}
	l := Lineage{OriginID: origin, OriginHead: head, BackupID: backupID}
	if origin != "" {
		l.Ancestors = append(l.Ancestors, origin)
	}
	for _, a := range prev.Ancestors {
		if !slices.Contains(l.Ancestors, a) && a != id {
			l.Ancestors = append(l.Ancestors, a)
		}
	}
	v, err := json.Marshal(l)
	if err != nil {
		return Lineage{}, err
	}
	// A sealed copy's key store (the backup's) still names the origin:
	// it is bound to the copy first, so that the copy, once it has its
	// identity, opens only with it and the origin never does (sealbind.go).
	if s.sealer != nil {
		if err := s.sealer.Bind(ctx, id); err != nil {
			return Lineage{}, fmt.Errorf("bind the restored key store to the copy: %w", err)
		}
	}
	b := s.db.NewBatch()
	_ = b.Set([]byte(databaseIDKey), []byte(id), nil)
	_ = b.Set([]byte(lineageKey), v, nil)
	if err := s.apply(ctx, write{kind: writeState, batch: b, sync: true}); err != nil {
		return Lineage{}, fmt.Errorf("record the restored database's identity: %w", err)
	}
	return l, s.recordIdentity(ctx)
}
