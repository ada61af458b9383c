package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// backup create and backup verify say whether a backup holds sealed
// content (and so its key store, which a restore needs the KEK and a
// folder of its own for), as the manifest does.
func TestBackupOutputSaysSealed(t *testing.T) {
	sealed, _ := sealedHarness(t, testKEK(8))
	writeSealed(t, sealed.environ, 1)
	plain := newHarness(t)
	plain.mustRun("seed", "--threads", "1")
	for _, c := range []struct {
		h    *harness
		want string
	}{{sealed, "sealed:      true"}, {plain, "sealed:      false"}} {
		archive := filepath.Join(t.TempDir(), "b.tar")
		out := c.h.mustRun("backup", "create", "--out", archive)
		if !strings.Contains(out, c.want) {
			t.Errorf("backup create printed no %q:\n%s", c.want, out)
		}
		if out := c.h.mustRun("backup", "verify", archive); !strings.Contains(out, c.want) {
			t.Errorf("backup verify printed no %q:\n%s", c.want, out)
		}
	}
}
