package faults

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/backup"
)

// A server killed (SIGKILL) while its scheduler writes a backup leaves no
// archive under a backup's name: every file there verifies, and the
// partial one is removed at a later start once older than KEEP. A server
// stopped (SIGTERM) during a scheduled backup leaves nothing partial, no
// staging checkpoint, and backup list lists exactly the files there.
func TestFaultScheduledBackupKilled(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	backups := filepath.Join(s.dir, "backups")
	env := s.env().with(
		"PROGRESSDB_BACKUP_PATH", backups,
		"PROGRESSDB_BACKUP_CRON", "@every 1s",
		"PROGRESSDB_BACKUP_KEEP", "30d",
	)
	if p := runCLI(t, env, "seed", "--threads", "1000", "--messages", "40"); p.code != 0 {
		t.Fatalf("seed: %d\n%s", p.code, p.output())
	}
	partials := func() []string {
		m, _ := filepath.Glob(filepath.Join(backups, ".progressdb-backup-*.tmp-*"))
		return m
	}
	caught := false
	for attempt := 0; attempt < 10 && !caught; attempt++ {
		srv := startServer(t, env)
		waitFor(t, time.Minute, "a scheduled backup being written", func() bool { return len(partials()) > 0 })
		srv.kill()
		caught = len(partials()) > 0 // it may have been renamed just before the kill
	}
	if !caught {
		t.Fatal("every scheduled backup was complete before the server could be killed")
	}
	left := partials()
	if len(left) != 1 {
		t.Fatalf("partial archives %v, want the killed one", left)
	}
	named, _ := filepath.Glob(filepath.Join(backups, "progressdb-backup-*"))
	for _, f := range named {
		verifyBackup(t, f)
	}

	// Younger than KEEP, the partial archive stays at the next start (a
	// backup may be being written under such a name); older, it goes.
	longAgo := time.Now().Add(-31 * 24 * time.Hour)
	if err := os.Chtimes(left[0], longAgo, longAgo); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, env)
	waitFor(t, time.Minute, "the old partial archive to be removed", func() bool {
		_, err := os.Stat(left[0])
		return os.IsNotExist(err)
	})
	// Stopped during a backup or between two: nothing partial is left.
	complete := func() []string {
		m, _ := filepath.Glob(filepath.Join(backups, "progressdb-backup-*"))
		return m
	}
	waitFor(t, time.Minute, "a scheduled backup written", func() bool { return len(complete()) > 0 })
	waitFor(t, time.Minute, "the next scheduled backup being written", func() bool { return len(partials()) > 0 })
	if code := srv.stop(t); code != 0 {
		t.Fatalf("serve exited %d\n%s", code, srv.output())
	}
	if p := partials(); len(p) > 0 {
		t.Errorf("partial archives left by a stopped server: %v", p)
	}
	if staging, _ := filepath.Glob(filepath.Join(s.db, ".backup-checkpoint-*")); len(staging) > 0 {
		t.Errorf("staging checkpoint left by a stopped server: %v", staging)
	}

	named = complete()
	p := runCLI(t, env, "backup", "list", "--json")
	if p.code != 0 {
		t.Fatalf("backup list: %d\n%s", p.code, p.output())
	}
	var l backup.Listing
	if err := json.Unmarshal([]byte(p.stdout.String()), &l); err != nil {
		t.Fatalf("backup list --json: %v\n%s", err, p.output())
	}
	if len(l.Backups) != len(named) || len(named) == 0 {
		t.Fatalf("backup list shows %d backups, the folder holds %v", len(l.Backups), named)
	}
	for _, b := range l.Backups {
		rep := verifyBackup(t, filepath.Join(backups, b.File))
		if rep.Manifest.BackupID != b.BackupID || rep.Manifest.Threads == 0 {
			t.Errorf("%s: listed as %s, holds %s with %d threads", b.File, b.BackupID, rep.Manifest.BackupID, rep.Manifest.Threads)
		}
	}
}
