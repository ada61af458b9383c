package app

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

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

// Validate checks what config.Load cannot: the database path must be a
// folder (or creatable as one); with retention enabled, the audit folder
// must be creatable and writable, because a run that cannot write its
// audit deletes nothing (better to refuse at startup than to fail every run).
func Validate(cfg config.Config) error {
	if err := checkDir(cfg.DBPath); err != nil {
		return &StartupError{Var: "PROGRESSDB_DB_PATH", Value: cfg.DBPath, Rule: "must be a folder", Err: err}
	}
	if !cfg.Retention.Enabled {
		return nil
	}
	if err := checkWritableDir(cfg.Retention.AuditPath); err != nil {
		return &StartupError{Var: "PROGRESSDB_RETENTION_AUDIT_PATH", Value: cfg.Retention.AuditPath,
			Rule: "must be a writable folder", Err: err}
	}
	if err := checkWritableDir(filepath.Dir(cfg.Retention.LeasePath)); err != nil {
		return &StartupError{Var: "PROGRESSDB_RETENTION_LEASE_PATH", Value: cfg.Retention.LeasePath,
			Rule: "its folder must be writable", Err: err}
	}
	if p := cfg.Retention.ExportPath; p != "" {
		if err := checkExportDir(p); err != nil {
			return &StartupError{Var: config.VarExportPath, Value: p,
				Rule: "must be a writable folder, not a symbolic link", Err: err}
		}
	}
	return nil
}

// checkExportDir refuses an export root that is a symbolic link (exports
// could be sent anywhere by whoever can change it) or anything but a
// folder, then makes sure it can be created and written.
func checkExportDir(dir string) error {
	info, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case info.Mode()&fs.ModeSymlink != 0:
		return errors.New("is a symbolic link")
	case !info.IsDir():
		return fmt.Errorf("is not a folder (%s)", info.Mode().Type())
	}
	return checkWritableDir(dir)
}

// checkDir makes sure dir is a folder, creating it when missing.
func checkDir(dir string) error {
	return os.MkdirAll(dir, 0o750)
}

func checkWritableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
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
