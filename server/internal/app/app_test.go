package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// get answers the body of a 200 response.
// waitAnswering waits until the server at addr answers /healthz, for at
// most 20 seconds, and returns the status it answered.
func waitAnswering(t *testing.T, addr string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			return resp.StatusCode
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	return string(b)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// Serve answers on its address, then on cancellation shuts down and closes
// the store cleanly, so the database opens again at once.
func TestServeStartsAndShutsDownCleanly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	addr := freeAddr(t)
	cfg, err := config.Load([]string{
		"PROGRESSDB_DB_PATH=" + dir,
		"PROGRESSDB_ADDR=" + addr,
		"PROGRESSDB_RETENTION_ENABLED=true",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()

	if code := waitAnswering(t, addr); code != http.StatusOK {
		t.Fatalf("healthz: %d", code)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after cancellation")
	}
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatalf("reopen after shutdown: %v", err)
	}
	st.Close()
}

// A run that completed before this start: the last-success gauge shows it
// rather than 0, even with retention off (no run can move it meanwhile).
// The build is named by progressdb_build_info.
func TestServeRestoresLastSuccessAndNamesTheBuild(t *testing.T) {
	addr := freeAddr(t)
	cfg, err := config.Load([]string{"PROGRESSDB_DB_PATH=" + filepath.Join(t.TempDir(), "data"), "PROGRESSDB_ADDR=" + addr})
	if err != nil {
		t.Fatal(err)
	}
	finished := time.Date(2025, 3, 1, 2, 0, 5, 0, time.UTC)
	w, err := audit.Create(cfg.Retention.AuditPath, "before-start", audit.Header{StartedAt: finished.Add(-5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(audit.Footer{FinishedAt: finished, Status: audit.RunCompleted}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	waitAnswering(t, addr)

	metrics := get(t, "http://"+addr+"/metrics")
	for _, want := range []string{
		fmt.Sprintf("progressdb_retention_last_success_timestamp_seconds %g\n", float64(finished.Unix())),
		`progressdb_build_info{commit="`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestValidateRefusesAnAuditFolderThatCannotBeCreated(t *testing.T) {
	cfg, err := config.Load([]string{"PROGRESSDB_DB_PATH=" + t.TempDir(), "PROGRESSDB_RETENTION_ENABLED=true"})
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(cfg); err != nil {
		t.Fatalf("the default audit folder is refused: %v", err)
	}
	// A regular file where a folder must be (tests run as root, which
	// ignores permission bits).
	blocker := filepath.Join(t.TempDir(), "blocker")
	if err := os.WriteFile(blocker, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Retention.AuditPath = filepath.Join(blocker, "audit")
	var se *StartupError
	if err := Validate(cfg); !errors.As(err, &se) || se.Var != "PROGRESSDB_RETENTION_AUDIT_PATH" {
		t.Fatalf("got %v", err)
	}
}

func TestValidateExportPath(t *testing.T) {
	base := t.TempDir()
	cfg, err := config.Load([]string{"PROGRESSDB_DB_PATH=" + filepath.Join(base, "db"), "PROGRESSDB_RETENTION_ENABLED=true"})
	if err != nil {
		t.Fatal(err)
	}
	folder := filepath.Join(base, "folder")
	file := filepath.Join(base, "file")
	fifo := filepath.Join(base, "fifo")
	link := filepath.Join(base, "link")
	if err := os.Mkdir(folder, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(folder, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path    string
		errHas  string // "" when accepted
		created bool
	}{
		{folder, "", false},
		{filepath.Join(base, "new", "exports"), "", true},
		{link, "symbolic link", false},
		{file, "not a folder", false},
		{fifo, "not a folder", false},
		{filepath.Join(file, "exports"), "not a directory", false},
	} {
		cfg.Retention.ExportPath = tc.path
		err := Validate(cfg)
		if tc.errHas == "" {
			if err != nil {
				t.Errorf("%s refused: %v", tc.path, err)
			}
			if info, err := os.Stat(tc.path); err != nil || !info.IsDir() {
				t.Errorf("%s not there as a folder after validation: %v", tc.path, err)
			}
			continue
		}
		var se *StartupError
		if !errors.As(err, &se) || se.Var != config.VarExportPath || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("%s: got %v, want a startup error naming %s and %q", tc.path, err, config.VarExportPath, tc.errHas)
		}
	}
	if info, err := os.Lstat(fifo); err != nil || info.Mode()&fs.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was touched: %v", err)
	}
}

// A run's file left in progress by a crash is sealed at the next start
// even with retention disabled, so the status does not report the dead
// run as running forever.
func TestServeSealsAbandonedFilesWithRetentionDisabled(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	addr := freeAddr(t)
	cfg, err := config.Load([]string{"PROGRESSDB_DB_PATH=" + dir, "PROGRESSDB_ADDR=" + addr})
	if err != nil {
		t.Fatal(err)
	}
	w, err := audit.Create(cfg.Retention.AuditPath, "crashed1", audit.Header{StartedAt: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	abandoned := w.Path() // never closed: a crash

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	waitAnswering(t, addr)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := os.Stat(abandoned); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the abandoned file is still in progress: %v", err)
	}
	sum, err := audit.LastRun(cfg.Retention.AuditPath)
	if err != nil || sum == nil || sum.Footer == nil || sum.Footer.Status != audit.RunAborted {
		t.Fatalf("last run after start: %+v, %v", sum, err)
	}
}

// A signing key that cannot be used stops startup (exit 2) instead of
// letting runs write unsigned files.
func TestValidateRefusesABadSigningKey(t *testing.T) {
	dir := t.TempDir()
	notKey := filepath.Join(dir, "not-a-key.pem")
	if err := os.WriteFile(notKey, []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{notKey, filepath.Join(dir, "missing.pem"), dir} {
		cfg, err := config.Load([]string{"PROGRESSDB_DB_PATH=" + filepath.Join(dir, "db"), "PROGRESSDB_AUDIT_SIGNING_KEY=" + path})
		if err != nil {
			t.Fatal(err)
		}
		var se *StartupError
		if err := Validate(cfg); !errors.As(err, &se) || se.Var != config.VarAuditSigningKey {
			t.Errorf("Validate with key %s: %v, want a startup error naming %s", path, err, config.VarAuditSigningKey)
		}
		if err := Check(cfg); !errors.As(err, &se) || se.Var != config.VarAuditSigningKey {
			t.Errorf("Check with key %s: %v", path, err)
		}
	}
}

// Startup creates a missing database folder 0700: it holds chat content.
func TestValidateCreatesThePrivateDatabaseFolder(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	db := filepath.Join(t.TempDir(), "db")
	cfg, err := config.Load([]string{"PROGRESSDB_DB_PATH=" + db})
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(cfg); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(db)
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("database folder: %v %v, want mode 0700", info, err)
	}
}

// A lease path where a folder or a named pipe sits is refused at startup
// and by config check.
func TestValidateRefusesALeasePathThatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	folder := filepath.Join(dir, "lease-folder")
	if err := os.Mkdir(folder, 0o750); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "lease-fifo")
	if err := syscall.Mkfifo(fifo, 0o640); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{folder, fifo} {
		cfg, err := config.Load([]string{"PROGRESSDB_DB_PATH=" + filepath.Join(dir, "db"),
			"PROGRESSDB_RETENTION_ENABLED=true", "PROGRESSDB_RETENTION_LEASE_PATH=" + p})
		if err != nil {
			t.Fatal(err)
		}
		for name, check := range map[string]func(config.Config) error{"Validate": Validate, "Check": Check} {
			var se *StartupError
			if err := check(cfg); !errors.As(err, &se) || se.Var != config.VarLeasePath {
				t.Errorf("%s with the lease path %s: %v", name, p, err)
			}
		}
	}
}

// With PROGRESSDB_BACKUP_PATH set, serve writes backups on
// PROGRESSDB_BACKUP_CRON into it, counted in the metrics, and shows how
// far apart they are for the alert; a file there that is not a backup of
// ours is left alone.
func TestServeWritesScheduledBackups(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addr := freeAddr(t)
	backups := filepath.Join(dir, "backups")
	cfg, err := config.Load([]string{
		"PROGRESSDB_DB_PATH=" + filepath.Join(dir, "data"),
		"PROGRESSDB_RETENTION_AUDIT_PATH=" + filepath.Join(dir, "audit"),
		"PROGRESSDB_ADDR=" + addr,
		"PROGRESSDB_BACKUP_PATH=" + backups,
		"PROGRESSDB_BACKUP_CRON=@every 1s",
		"PROGRESSDB_BACKUP_KEEP=1h",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(backups, 0o700); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(backups, "progressdb-backup-20200101T000000Z-aaaaaaaaaaaa.tar")
	if err := os.WriteFile(foreign, []byte("not a backup"), 0o600); err != nil {
		t.Fatal(err)
	}
	longAgo := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(foreign, longAgo, longAgo); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	waitAnswering(t, addr)

	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(get(t, "http://"+addr+"/metrics"), `progressdb_backup_total{result="success"} 1`) {
		if time.Now().After(deadline) {
			t.Fatal("no scheduled backup counted within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	metrics := get(t, "http://"+addr+"/metrics")
	if !strings.Contains(metrics, "progressdb_backup_interval_seconds 1\n") {
		t.Error("/metrics lacks progressdb_backup_interval_seconds 1")
	}
	written, _ := filepath.Glob(filepath.Join(backups, "progressdb-backup-2*.tar*"))
	if len(written) < 2 {
		t.Fatalf("backup folder holds %v, want a scheduled backup beside the foreign file", written)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("foreign file: %v", err)
	}
}

// lockedLog is a log sink safe for the server's goroutines.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// With backups on, an audit folder inside DB_PATH is warned about at
// start: a copy of the data folder put back brings its old trail with it,
// and the purges since could not be replayed. Outside, no warning.
func TestServeWarnsOfAnAuditFolderInsideTheDatabase(t *testing.T) {
	for _, inside := range []bool{true, false} {
		root := t.TempDir()
		env := []string{
			"PROGRESSDB_DB_PATH=" + filepath.Join(root, "data"),
			"PROGRESSDB_ADDR=" + freeAddr(t),
			"PROGRESSDB_BACKUP_PATH=" + filepath.Join(root, "backups"),
		}
		if !inside {
			env = append(env, "PROGRESSDB_RETENTION_AUDIT_PATH="+filepath.Join(root, "audit"))
		}
		cfg, err := config.Load(env)
		if err != nil {
			t.Fatal(err)
		}
		logs := &lockedLog{}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- Serve(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil))) }()
		waitAnswering(t, cfg.Addr)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(logs.String(), "audit_path_inside_db_path"); got != inside {
			t.Errorf("audit folder inside: %v; warned: %v\n%s", inside, got, logs.String())
		}
	}
}

// PROGRESSDB_BACKUP_PATH must be a folder the server can write, created
// 0700 when missing: a typo there would fail every scheduled backup (and
// their expiry) until the alert fired two periods later.
func TestValidateBackupPath(t *testing.T) {
	base := t.TempDir()
	cfg, err := config.Load([]string{"PROGRESSDB_DB_PATH=" + filepath.Join(base, "db")})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	readOnly := filepath.Join(base, "read-only")
	if err := os.Mkdir(readOnly, 0o500); err != nil {
		t.Fatal(err)
	}
	cfg.Backup.Path = filepath.Join(base, "new", "backups")
	if err := Validate(cfg); err != nil {
		t.Fatalf("a new backup folder refused: %v", err)
	}
	if info, err := os.Stat(cfg.Backup.Path); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("backup folder not created 0700: %v %v", info, err)
	}
	cases := []struct{ path, errHas string }{
		{file, "not a directory"},
		{filepath.Join(file, "backups"), "not a directory"},
	}
	if os.Geteuid() != 0 { // root writes anywhere
		cases = append(cases, struct{ path, errHas string }{readOnly, "permission denied"})
	}
	for _, tc := range cases {
		cfg.Backup.Path = tc.path
		var se *StartupError
		if err := Validate(cfg); !errors.As(err, &se) || se.Var != config.VarBackupPath || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("%s: got %v, want a startup error naming %s and %q", tc.path, err, config.VarBackupPath, tc.errHas)
		}
	}
}
