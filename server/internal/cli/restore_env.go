package cli

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/progressdb/progressdb/server/pkg/config"
)

// serveEnv is the environment that serves a restored copy, given the
// environment the restore ran in (usually the original server's shell):
// the copy's own database, trail and key store, and none of the
// original's folders a server writes to (its lease, backups, exports) or,
// for a plain copy, its key store. An empty value means unset.
func serveEnv(rep restoreReport, cfg config.Config) map[string]string {
	env := map[string]string{
		config.VarDBPath:    absPath(rep.DB),
		config.VarAuditPath: absPath(rep.Audit),
		// The default, beside the copy's trail, never the original's.
		config.VarLeasePath:  "",
		config.VarBackupPath: "",
		config.VarExportPath: "",
	}
	if rep.Attachments != "" {
		// The copy's own folder, never the original's.
		env[config.VarAttachmentsURL], _ = config.FileURL(rep.Attachments)
	}
	switch {
	case rep.KeyStore != "":
		env[config.VarKeystorePath] = absPath(rep.KeyStore)
	case cfg.KEK != "" || cfg.KeystorePath != "":
		// A plain copy served with the original's KEK would be sealed
		// under the original's key store.
		env[config.VarKEK], env[config.VarKEKFile], env[config.VarKeystorePath] = "", "", ""
	}
	return env
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// serveEnvOrder is the order printRestore gives the variables in.
var serveEnvOrder = []string{config.VarDBPath, config.VarAuditPath, config.VarAttachmentsURL, config.VarKEK, config.VarKEKFile,
	config.VarKeystorePath, config.VarLeasePath, config.VarBackupPath, config.VarExportPath}

// printServeEnv prints env as lines a POSIX shell runs.
func printServeEnv(w io.Writer, env map[string]string) {
	fmt.Fprintln(w, "serve it:    with this environment, the rest as the restore's (a drill must not reach the original's folders):")
	var unset []string
	for _, name := range serveEnvOrder {
		v, ok := env[name]
		switch {
		case !ok:
		case v == "":
			unset = append(unset, name)
		default:
			fmt.Fprintf(w, "  export %s=%s\n", name, shellQuote(v, `'\''`))
		}
	}
	if len(unset) > 0 {
		fmt.Fprintf(w, "  unset %s\n", strings.Join(unset, " "))
	}
	fmt.Fprintf(w, "  # %s: to back the copy up, a folder of its own, never the original's\n", config.VarBackupPath)
}
