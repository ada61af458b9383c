package app

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// StartupError is a configuration the environment parsed but the machine
// cannot honour (for example an audit folder that cannot be written). The
// command line exits 2 with its one-line message, like any invalid
// configuration.
type StartupError struct {
	Var, Value, Rule string
	Err              error
}

func (e *StartupError) Error() string {
	return fmt.Sprintf("%s=%q: %s: %v", e.Var, e.Value, e.Rule, e.Err)
}

func (e *StartupError) Unwrap() error { return e.Err }

// folder is one folder the server needs, and the setting that names it.
type folder struct {
	Var, Value, Rule string
	dir              string
	perm             os.FileMode // the mode it is created with when missing
	writable         bool        // must be writable, not only a folder
	noLink           bool        // must not be a symbolic link
}

// folders lists what the server needs on disk: the database folder must
// be a folder it can write (Pebble writes its lock file there; created
// 0700: it holds chat content), and so must the backup folder when set;
// with retention enabled, the audit folder
// must be creatable and writable, because a run that cannot write its
// audit deletes nothing (better to refuse at startup than to fail every
// run).
func folders(cfg config.Config) []folder {
	out := []folder{{Var: config.VarDBPath, Value: cfg.DBPath, Rule: "must be a writable folder",
		dir: cfg.DBPath, perm: 0o700, writable: true}}
	// Scheduled backups and POST /admin/backups write there: a folder they
	// cannot write fails every backup, and the expiry with it, until the
	// alert says so two periods later. Created 0700: backups hold chat
	// content.
	if p := cfg.Backup.Path; p != "" {
		out = append(out, folder{Var: config.VarBackupPath, Value: p, Rule: "must be a writable folder",
			dir: p, perm: 0o700, writable: true})
	}
	if !cfg.Retention.Enabled {
		return out
	}
	out = append(out,
		folder{Var: config.VarAuditPath, Value: cfg.Retention.AuditPath, Rule: "must be a writable folder",
			dir: cfg.Retention.AuditPath, perm: 0o750, writable: true},
		folder{Var: config.VarLeasePath, Value: cfg.Retention.LeasePath, Rule: "its folder must be writable",
			dir: filepath.Dir(cfg.Retention.LeasePath), perm: 0o750, writable: true},
	)
	if p := cfg.Retention.ExportPath; p != "" {
		out = append(out, folder{Var: config.VarExportPath, Value: p,
			Rule: "must be a writable folder, not a symbolic link", dir: p, perm: 0o750, writable: true, noLink: true})
	}
	return out
}

// checkLeaseFile refuses a lease path where something other than a
// regular file sits (a folder, a named pipe): every run would fail on it,
// or hang on a pipe. A symbolic link is refused by the run itself.
func checkLeaseFile(cfg config.Config) error {
	if !cfg.Retention.Enabled {
		return nil
	}
	p := cfg.Retention.LeasePath
	if err := retention.CheckLeasePath(p); errors.Is(err, retention.ErrLeaseNotRegular) {
		return &StartupError{Var: config.VarLeasePath, Value: p, Rule: "must be a regular file or absent", Err: err}
	}
	return nil
}

// Validate checks what config.Load cannot, creating the folders (and the
// log file) the server needs when they are missing. serve calls it before
// it opens the store.
func Validate(cfg config.Config) error { return validate(cfg, true) }

// Check is Validate for `progressdb config check`: the same checks, made
// the same way (creating a missing folder is the only sure test that it
// can be created), after which it removes what they created, so that it
// refuses exactly what serve refuses and leaves nothing behind.
func Check(cfg config.Config) error { return validate(cfg, false) }

// validate is the one validation of serve and config check; keep says
// whether what it created stays (serve) or is removed again (check). A
// refused configuration leaves nothing behind either way.
func validate(cfg config.Config, keep bool) (err error) {
	var c created
	defer func() {
		if !keep || err != nil {
			c.remove()
		}
	}()
	if err := checkLeaseFile(cfg); err != nil {
		return err
	}
	if _, err := SigningKey(cfg); err != nil {
		return err
	}
	if _, err := loadTransport(cfg); err != nil {
		return err
	}
	// Before any folder is made: a start refused for its KEK leaves none.
	if err := checkKEK(context.Background(), cfg); err != nil {
		return err
	}
	for _, f := range folders(cfg) {
		if f.noLink {
			if err := audit.CheckExportFolder(f.dir); err != nil {
				return &StartupError{Var: f.Var, Value: f.Value, Rule: f.Rule, Err: err}
			}
		}
		err := c.mkdirAll(f.dir, f.perm)
		if err == nil && f.writable {
			err = checkWritable(f.dir)
		}
		if err != nil {
			return &StartupError{Var: f.Var, Value: f.Value, Rule: f.Rule, Err: err}
		}
	}
	// serve has opened the log file already (the logger comes first); the
	// same open tells config check whether it could.
	if path, ok := strings.CutPrefix(cfg.LogSink, "file:"); ok {
		err := c.mkdirAll(filepath.Dir(path), 0o750)
		if err == nil {
			err = c.openFile(path)
		}
		if err != nil {
			return &StartupError{Var: config.VarLogSink, Value: cfg.LogSink, Rule: "must be stderr or a writable file:<path>", Err: err}
		}
	}
	return nil
}

// created records the paths validate created, in order, so that Check
// can remove them again.
type created []string

// mkdirAll is os.MkdirAll, recording the folders it created.
func (c *created) mkdirAll(dir string, perm os.FileMode) error {
	var missing []string
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		missing = append(missing, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	err := os.MkdirAll(dir, perm)
	for i := len(missing) - 1; i >= 0; i-- {
		if _, serr := os.Lstat(missing[i]); serr == nil {
			*c = append(*c, missing[i])
		}
	}
	return err
}

// openFile opens path for appending, as the log sink does, creating it
// when missing (and recording that).
func (c *created) openFile(path string) error {
	_, statErr := os.Lstat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		*c = append(*c, path)
	}
	return f.Close()
}

// remove removes what was recorded, newest first; a folder something
// else has put a file in meanwhile stays.
func (c created) remove() {
	for i := len(c) - 1; i >= 0; i-- {
		_ = os.Remove(c[i])
	}
}

// checkWritable writes and removes a file in dir.
func checkWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	cerr := f.Close()
	if err := os.Remove(name); err != nil {
		return err
	}
	return cerr
}

// SigningKey loads the audit signing key named by
// PROGRESSDB_AUDIT_SIGNING_KEY; nil when unset. A key that cannot be read
// or is not an ed25519 private key is a *StartupError (exit 2): a server
// that was asked to sign must not write unsigned files.
func SigningKey(cfg config.Config) (ed25519.PrivateKey, error) {
	if cfg.AuditSigningKey == "" {
		return nil, nil
	}
	key, err := audit.LoadSigningKey(cfg.AuditSigningKey)
	if err != nil {
		return nil, &StartupError{Var: config.VarAuditSigningKey, Value: cfg.AuditSigningKey,
			Rule: "must be an ed25519 private key in PEM (PKCS #8, openssl genpkey -algorithm ed25519)", Err: err}
	}
	return key, nil
}
