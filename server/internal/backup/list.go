package backup

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// Listing is what backup list and GET /admin/backups answer (spec §10).
type Listing struct {
	Path    string  `json:"path"` // BACKUP_PATH
	Keep    string  `json:"keep"` // BACKUP_KEEP, as configured ("30d")
	Backups []Entry `json:"backups"`
}

// Entry is one backup in BACKUP_PATH, oldest first.
type Entry struct {
	File      string     `json:"file"` // the name within BACKUP_PATH
	BackupID  string     `json:"backup_id"`
	CreatedAt time.Time  `json:"created_at"`
	Age       int64      `json:"age_seconds"`
	ExpiresAt time.Time  `json:"expires_at"` // when the scheduler deletes it
	Size      int64      `json:"size"`
	AuditHead audit.Head `json:"audit_head"`
	// PurgedItems counts the purged records in the audit trail after the
	// backup's head: items purged from the database that this backup
	// still holds until it expires (or a restore replays them).
	PurgedItems int64 `json:"purged_items"`
	// PurgedItemsComplete is false when the trail after the head does not
	// link up (a file missing or changed): the count may then be short.
	PurgedItemsComplete bool `json:"purged_items_complete"`
}

// List describes the backups in dir against the audit trail at auditRoot,
// at now, with keep the BACKUP_KEEP that expires them. Files that are not
// progressdb backups by name and manifest are left out.
func List(dir, auditRoot string, keep time.Duration, now time.Time) (Listing, error) {
	l := Listing{Path: dir, Keep: config.FormatDuration(keep), Backups: []Entry{}}
	held, _, err := Scan(dir)
	if err != nil {
		return l, err
	}
	now = now.UTC()
	for _, h := range held {
		m := h.Manifest
		created := m.CreatedAt.UTC()
		// Replays (restore, start) are passed over: they record again
		// purges of runs already counted.
		purged, complete, err := audit.Pending(auditRoot, m.AuditHead, "")
		if err != nil {
			return l, fmt.Errorf("backup list: audit trail: %w", err)
		}
		l.Backups = append(l.Backups, Entry{
			File: filepath.Base(h.Path), BackupID: m.BackupID, CreatedAt: created,
			Age: int64(max(now.Sub(created), 0) / time.Second), ExpiresAt: created.Add(keep),
			Size: h.Size, AuditHead: m.AuditHead, PurgedItems: purged, PurgedItemsComplete: complete,
		})
	}
	return l, nil
}

// List describes the backups in BACKUP_PATH (ErrNoBackupPath when unset).
func (c *Creator) List(ctx context.Context) (Listing, error) {
	if c.path == "" {
		return Listing{}, ErrNoBackupPath
	}
	if c.keep <= 0 {
		return Listing{}, errors.New("backup list: no PROGRESSDB_BACKUP_KEEP given")
	}
	if err := ctx.Err(); err != nil {
		return Listing{}, err
	}
	return List(c.path, c.audit, c.keep, c.now())
}
