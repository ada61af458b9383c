package doccheck

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/internal/testtools"
)

// docs/clients.md's block for examples/typescript, run under sh in a copy
// of the repository's two TypeScript folders as a fresh clone has them
// (no node_modules, no dist), builds the example: its build builds the
// client first, which it installs from its folder.
func TestTypeScriptExampleBuildsAsDocumented(t *testing.T) {
	if testing.Short() {
		t.Skip("installs packages")
	}
	sh := testtools.Need(t, "sh", "a POSIX shell: Debian package dash")
	testtools.Need(t, "npm", "Debian package npm")
	var run string
	for _, b := range blocks(readPage(t, "docs/clients.md")) {
		if b.lang == "sh" && strings.HasPrefix(b.text, "cd examples/typescript\n") {
			run = b.text
		}
	}
	if run == "" {
		t.Fatal("docs/clients.md has no sh block starting with cd examples/typescript")
	}
	root, work := repoRoot(t), t.TempDir()
	for _, d := range []string{"clients/typescript", "examples/typescript"} {
		copyTree(t, filepath.Join(root, d), filepath.Join(work, d))
	}
	cmd := exec.Command(sh, "-e", "-c", run)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false", "npm_config_audit=false", "npm_config_fund=false", "npm_config_prefer_offline=true")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docs/clients.md's block for examples/typescript: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(work, "examples", "typescript", "dist", "example.js")); err != nil {
		t.Fatalf("the example was not built: %v", err)
	}
}

// copyTree copies the files of src into dst, leaving out what a clone
// does not have (node_modules, dist).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "dist") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
