package app

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

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
	writable         bool // must be writable, not only a folder
	noLink           bool // must not be a symbolic link
	private          bool // created 0700: it holds chat content
}

// folders lists what the server needs on disk: the database path must be
// a folder (or creatable as one); with retention enabled, the audit
// folder must be creatable and writable, because a run that cannot write
// its audit deletes nothing (better to refuse at startup than to fail
// every run).
func folders(cfg config.Config) []folder {
	out := []folder{{Var: config.VarDBPath, Value: cfg.DBPath, Rule: "must be a folder", dir: cfg.DBPath, private: true}}
	if !cfg.Retention.Enabled {
		return out
	}
	out = append(out,
		folder{Var: config.VarAuditPath, Value: cfg.Retention.AuditPath, Rule: "must be a writable folder",
			dir: cfg.Retention.AuditPath, writable: true},
		folder{Var: config.VarLeasePath, Value: cfg.Retention.LeasePath, Rule: "its folder must be writable",
			dir: filepath.Dir(cfg.Retention.LeasePath), writable: true},
	)
	if p := cfg.Retention.ExportPath; p != "" {
		out = append(out, folder{Var: config.VarExportPath, Value: p,
			Rule: "must be a writable folder, not a symbolic link", dir: p, writable: true, noLink: true})
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

// Validate checks what config.Load cannot, creating the folders the
// server needs when they are missing.
func Validate(cfg config.Config) error {
	if err := checkLeaseFile(cfg); err != nil {
		return err
	}
	if _, err := SigningKey(cfg); err != nil {
		return err
	}
	for _, f := range folders(cfg) {
		check := checkDir
		switch {
		case f.writable:
			check = checkWritableDir
		case f.private:
			check = checkPrivateDir
		}
		if f.noLink {
			if err := audit.CheckExportFolder(f.dir); err != nil {
				return &StartupError{Var: f.Var, Value: f.Value, Rule: f.Rule, Err: err}
			}
		}
		if err := check(f.dir); err != nil {
			return &StartupError{Var: f.Var, Value: f.Value, Rule: f.Rule, Err: err}
		}
	}
	return nil
}

// Check is Validate without side effects, for `progressdb config check`:
// it creates nothing. A missing folder passes when its nearest existing
// parent is a folder this process may write, since serve creates it
// there. It also checks the log sink's file the same way.
func Check(cfg config.Config) error {
	if err := checkLeaseFile(cfg); err != nil {
		return err
	}
	if _, err := SigningKey(cfg); err != nil {
		return err
	}
	for _, f := range folders(cfg) {
		if f.noLink {
			if err := audit.CheckExportFolder(f.dir); err != nil {
				return &StartupError{Var: f.Var, Value: f.Value, Rule: f.Rule, Err: err}
			}
		}
		if err := probeDir(f.dir, f.writable); err != nil {
			return &StartupError{Var: f.Var, Value: f.Value, Rule: f.Rule, Err: err}
		}
	}
	if path, ok := strings.CutPrefix(cfg.LogSink, "file:"); ok {
		if err := probeFile(path); err != nil {
			return &StartupError{Var: config.VarLogSink, Value: cfg.LogSink, Rule: "must be stderr or a writable file:<path>", Err: err}
		}
	}
	return nil
}

// checkDir makes sure dir is a folder, creating it when missing.
func checkDir(dir string) error {
	return os.MkdirAll(dir, 0o750)
}

// checkPrivateDir makes sure dir is a folder, creating it 0700 when
// missing; an existing folder keeps its mode (the store warns when others
// can read it).
func checkPrivateDir(dir string) error {
	return os.MkdirAll(dir, 0o700)
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

// errNotDir: a path that must be a folder is something else.
var errNotDir = errors.New("not a folder")

// probeDir checks, creating nothing, that dir is a folder (writable when
// asked) or could be created as one.
func probeDir(dir string, writable bool) error {
	fi, err := os.Stat(dir)
	switch {
	case err == nil && !fi.IsDir():
		return fmt.Errorf("%s: %w", dir, errNotDir)
	case err == nil && writable:
		return access(dir)
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return probeCreatable(dir)
	default:
		return err
	}
}

// probeFile checks, creating nothing, that path is a writable file or
// could be created as one.
func probeFile(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("%s: is a folder", path)
	case err == nil:
		return access(path)
	case errors.Is(err, fs.ErrNotExist):
		return probeCreatable(path)
	default:
		return err
	}
}

// probeCreatable checks that the nearest existing parent of path is a
// folder this process may write, so path can be created.
func probeCreatable(path string) error {
	for p := filepath.Dir(filepath.Clean(path)); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) && p != filepath.Dir(p) {
			continue
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s: %w", p, errNotDir)
		}
		if err := access(p); err != nil {
			return fmt.Errorf("cannot create %s: %w", path, err)
		}
		return nil
	}
}

// access asks the kernel whether this process may write path, without
// writing.
func access(path string) error {
	if err := syscall.Access(path, 2 /* W_OK */); err != nil {
		return &fs.PathError{Op: "access", Path: path, Err: err}
	}
	return nil
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
