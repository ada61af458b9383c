package api

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// lateBackups forwards to a creator built after the env's store opens.
type lateBackups struct{ *backup.Creator }

// backupEnv serves the API with backups over a real retention runner;
// path is BACKUP_PATH ("" unset).
func backupEnv(t *testing.T, path string) *testEnv {
	t.Helper()
	late := &lateBackups{}
	e := newEnv(t, Options{AdminToken: "adm", Backups: late})
	r, err := retention.NewRunner(retention.RunnerOptions{
		Store: e.store,
		Config: config.Retention{Period: 30 * 24 * time.Hour, MinPeriod: time.Hour,
			AuditPath: filepath.Join(t.TempDir(), "audit")},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	late.Creator, err = backup.NewCreator(backup.Options{Store: e.store, Hold: r, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	e.bearer = "adm"
	return e
}

func TestCreateBackup(t *testing.T) {
	dir := t.TempDir()
	e := backupEnv(t, dir)
	e.expect(t, "POST", "/v1/threads", `{"id":"t1","title":"x","author":"a"}`, http.StatusCreated)
	var m backup.Manifest
	e.expect(t, "POST", "/admin/backups", "", http.StatusCreated).decode(t, &m)
	if m.BackupID == "" || m.Threads != 1 {
		t.Fatalf("manifest %+v", m)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "progressdb-backup-*-"+m.BackupID+".tar.zst"))
	if len(files) != 1 {
		t.Fatalf("backup files %v", files)
	}
	rep, err := backup.Verify(context.Background(), files[0], nil, t.TempDir())
	if err != nil || !rep.Valid {
		t.Fatalf("verify: %v %v", err, rep.Problems)
	}
	e.bearer = "wrong"
	e.expect(t, "POST", "/admin/backups", "", http.StatusUnauthorized)
}

func TestCreateBackupWithoutPath(t *testing.T) {
	e := backupEnv(t, "")
	if msg := e.expect(t, "POST", "/admin/backups", "", http.StatusConflict).errorText(t); !bytes.Contains([]byte(msg), []byte("PROGRESSDB_BACKUP_PATH")) {
		t.Fatalf("error %q does not name PROGRESSDB_BACKUP_PATH", msg)
	}
	if msg := e.expect(t, "GET", "/admin/backups", "", http.StatusConflict).errorText(t); !bytes.Contains([]byte(msg), []byte("PROGRESSDB_BACKUP_PATH")) {
		t.Fatalf("list: error %q does not name PROGRESSDB_BACKUP_PATH", msg)
	}
}

func TestStreamBackup(t *testing.T) {
	e := backupEnv(t, "")
	e.expect(t, "POST", "/v1/threads", `{"id":"t1","title":"x","author":"a"}`, http.StatusCreated)
	for _, q := range []string{"", "?compress=zstd"} {
		res := e.expect(t, "POST", "/admin/backups/stream"+q, "", http.StatusOK)
		path := filepath.Join(t.TempDir(), "b.tar")
		if err := os.WriteFile(path, res.body, 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := backup.Verify(context.Background(), path, nil, t.TempDir())
		if err != nil || !rep.Valid || rep.Manifest.Threads != 1 {
			t.Fatalf("%q: verify: %v %+v", q, err, rep)
		}
	}
	e.expect(t, "POST", "/admin/backups/stream?compress=gzip", "", http.StatusBadRequest)
	e.bearer = ""
	e.expect(t, "POST", "/admin/backups/stream", "", http.StatusUnauthorized)
}

func TestBackupRoutesOff(t *testing.T) {
	e := newEnv(t, Options{AdminToken: "adm"})
	e.bearer = "adm"
	e.expect(t, "POST", "/admin/backups", "", http.StatusServiceUnavailable)
	e.expect(t, "POST", "/admin/backups/stream", "", http.StatusServiceUnavailable)
	e.expect(t, "GET", "/admin/backups", "", http.StatusServiceUnavailable)
	off := newEnv(t, Options{Backups: &lateBackups{}})
	off.expect(t, "POST", "/admin/backups", "", http.StatusForbidden)
	off.expect(t, "POST", "/admin/backups/stream", "", http.StatusForbidden)
	off.expect(t, "GET", "/admin/backups", "", http.StatusForbidden)
}
