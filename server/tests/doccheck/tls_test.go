package doccheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/internal/testtools"
)

// docs/tls.md's try-out, pasted into POSIX sh (dash on Debian), makes the
// CA and certificates, stops where it began, and leaves every file the
// section's next blocks name where they name it; the certificates verify
// against the CA with the names and usages the page gives them.
func TestTLSTryOutRunsUnderSh(t *testing.T) {
	sh := testtools.Need(t, "sh", "a POSIX shell: Debian package dash")
	openssl := testtools.Need(t, "openssl", "Debian package openssl")
	bs := section(t, readPage(t, "docs/tls.md"), "## Trying it")
	if len(bs) < 2 || bs[0].lang != "sh" {
		t.Fatalf("the try-out section has %d blocks: want the try-out, marked sh, and the blocks using it", len(bs))
	}
	// The later blocks run servers; what they need of the try-out is
	// its files, checked in the same shell as a reader's next paste.
	var paths []string
	for _, b := range bs[1:] {
		for _, p := range regexp.MustCompile(`tls/[A-Za-z0-9._-]+`).FindAllString(b.text, -1) {
			if !slices.Contains(paths, p) {
				paths = append(paths, p)
			}
		}
	}
	if len(paths) == 0 {
		t.Fatal("the blocks after the try-out name no file under tls/")
	}
	script := bs[0].text
	for _, p := range paths {
		script += "test -r " + p + " || { echo " + p + " is not there from where the try-out began >&2; exit 1; }\n"
	}
	dir := t.TempDir()
	cmd := exec.Command(sh, "-e", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENSSL_CONF=/dev/null")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the try-out of docs/tls.md under %s: %v\n%s", sh, err, out)
	}
	for _, c := range []struct{ name, purpose string }{
		{"server", "sslserver"}, {"operator", "sslclient"}, {"node-1", "sslclient"}, {"node-1", "sslserver"},
	} {
		out, err := exec.Command(openssl, "verify", "-purpose", c.purpose, "-CAfile",
			filepath.Join(dir, "tls", "ca.crt"), filepath.Join(dir, "tls", c.name+".crt")).CombinedOutput()
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), ": OK") {
			t.Errorf("%s.crt for %s: %v\n%s", c.name, c.purpose, err, out)
		}
	}
	keys, _ := filepath.Glob(filepath.Join(dir, "tls", "*.key"))
	for _, k := range keys {
		if fi, err := os.Stat(k); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600 (%v)", k, fi.Mode().Perm(), err)
		}
	}
}
