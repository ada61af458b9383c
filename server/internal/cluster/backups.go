package cluster

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// ShardBackupPath is the folder of shard n's scheduled backups:
// <BACKUP_PATH>/shards/<n>.
func ShardBackupPath(backupPath string, n int) string {
	return filepath.Join(backupPath, "shards", strconv.Itoa(n))
}

// ListBackups describes the backups of every shard under backupPath
// (<BACKUP_PATH>/shards/<n>/), each against its shard's audit trail, oldest
// first: what backup list and GET /admin/backups answer on a cluster node.
// Each entry names its shard, and its file within backupPath.
func ListBackups(backupPath, auditPath string, keep time.Duration, now time.Time) (backup.Listing, error) {
	l := backup.Listing{Path: backupPath, Keep: config.FormatDuration(keep), Backups: []backup.Entry{}}
	dirs, err := os.ReadDir(filepath.Join(backupPath, "shards"))
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return l, err
	}
	for _, d := range dirs {
		n, err := strconv.Atoi(d.Name())
		if err != nil || n < 0 || !d.IsDir() || strconv.Itoa(n) != d.Name() {
			continue // not a shard's folder
		}
		sl, err := backup.List(ShardBackupPath(backupPath, n), ShardAuditPath(auditPath, n), keep, now)
		if err != nil {
			return l, err
		}
		for _, e := range sl.Backups {
			e.Shard = &n
			e.File = filepath.ToSlash(filepath.Join("shards", d.Name(), e.File))
			l.Backups = append(l.Backups, e)
		}
	}
	slices.SortStableFunc(l.Backups, func(a, b backup.Entry) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return l, nil
}
