package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// erasure verify reads a receipt and audit files, nothing else: a missing
// audit folder is named (exit 2), not reported as a receipt that does
// not verify; a shell with a key store's path but no KEK (settings it
// does not use) does not stop it; and a receipt of unsigned files gets one
// FAIL, saying why, not one more for each item of those files.
func TestErasureVerifyMessages(t *testing.T) {
	root, receipt, pub, _ := writeErasureTrail(t)

	missing := filepath.Join(t.TempDir(), "no-such-audit")
	for _, c := range []struct {
		env  []string
		args []string
		name string
	}{
		{[]string{"PROGRESSDB_RETENTION_AUDIT_PATH=" + missing}, nil, "PROGRESSDB_RETENTION_AUDIT_PATH"},
		{nil, []string{"--audit", missing}, "--audit"},
	} {
		h := newHarness(t, c.env...)
		code, out, errOut := h.run(append([]string{"erasure", "verify", receipt, "--public-key", pub}, c.args...)...)
		if code != exitUsage || !strings.Contains(errOut, missing) || !strings.Contains(errOut, c.name) || strings.Contains(out, "does NOT verify") {
			t.Errorf("audit folder missing (%s): exit %d, stdout %q, stderr %q; want 2 naming the folder and %s", c.name, code, out, errOut, c.name)
		}
	}

	h := newHarness(t, "PROGRESSDB_RETENTION_AUDIT_PATH="+root, "PROGRESSDB_KEYSTORE_PATH="+filepath.Join(t.TempDir(), "keys"))
	if code, out, errOut := h.run("erasure", "verify", receipt, "--public-key", pub); code != exitOK || !strings.Contains(out, "verifies") {
		t.Errorf("with a key store's path and no KEK: exit %d, %q %q; want 0, verifies", code, out, errOut)
	}

	root, receipt, pub, _ = writeErasureTrailSigned(t, false)
	h = newHarness(t, "PROGRESSDB_RETENTION_AUDIT_PATH="+root)
	code, out, _ := h.run("erasure", "verify", receipt, "--public-key", pub)
	if fails := strings.Count(out, "FAIL "); code != exitFailed || fails != 1 || !strings.Contains(out, "unsigned") ||
		!strings.Contains(out, "PROGRESSDB_AUDIT_SIGNING_KEY") {
		t.Errorf("unsigned receipt: exit %d, %d FAIL lines, want 1 saying unsigned and naming PROGRESSDB_AUDIT_SIGNING_KEY:\n%s", code, fails, out)
	}
	if _, err := os.Stat(root); err != nil {
		t.Fatal(err)
	}
}
