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
	// Shard is the cluster shard the backup holds (spec §11); File is
	// then shards/<n>/<name> within BACKUP_PATH. Absent on a single node.
	Shard *int `json:"shard,omitempty"`
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
	heads := make([]audit.Head, len(held))
	for i, h := range held {
		heads[i] = h.Manifest.AuditHead
	}
	purged, complete, err := pendingCounts(auditRoot, heads)
	if err != nil {
		return l, fmt.Errorf("backup list: audit trail: %w", err)
	}
	for i, h := range held {
		m := h.Manifest
		created := m.CreatedAt.UTC()
		l.Backups = append(l.Backups, Entry{
			File: filepath.Base(h.Path), BackupID: m.BackupID, CreatedAt: created,
			Age: int64(max(now.Sub(created), 0) / time.Second), ExpiresAt: created.Add(keep),
			Size: h.Size, AuditHead: m.AuditHead, PurgedItems: purged[i], PurgedItemsComplete: complete[i],
		})
	}
	return l, nil
}

// pendingCounts is audit.Pending for each head (replays not counted: they
// record again purges of runs already counted). Backups made one after
// another have heads on one chain: the trail is then read once, from the
// oldest head (a year of daily runs and 30 backups: one pass instead of
// 30). A head off that chain, or a chain that is not whole, is counted on
// its own.
func pendingCounts(root string, heads []audit.Head) (purged []int64, whole []bool, err error) {
	purged, whole = make([]int64, len(heads)), make([]bool, len(heads))
	if len(heads) == 0 {
		return purged, whole, nil
	}
	steps, ok, err := audit.Steps(root, heads[0])
	if err != nil {
		return nil, nil, err
	}
	at := make(map[string]int, len(steps)) // footer hash -> index in steps
	for i, st := range steps {
		at[st.Head.SHA256] = i
	}
	for i, h := range heads {
		from := -1
		if j, found := at[h.SHA256]; h == heads[0] {
			from = 0
		} else if ok && found && !h.IsZero() {
			from = j + 1
		}
		if from < 0 {
			if purged[i], whole[i], err = audit.Pending(root, h, ""); err != nil {
				return nil, nil, err
			}
			continue
		}
		whole[i] = ok
		for _, st := range steps[from:] {
			switch {
			case audit.IsReplay(st.Header):
			case st.Purged < 0:
				whole[i] = false
			default:
				purged[i] += st.Purged
			}
		}
	}
	return purged, whole, nil
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
