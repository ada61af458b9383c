package cli

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeSecretFile writes content to a new file of mode perm.
func writeSecretFile(t *testing.T, content string, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
	return p
}

// config check shows a secret's file by its path and the secret as
// <redacted>, warns of a file others can read and of sealing without a
// signing key, and refuses a secret set both ways naming both.
func TestConfigCheckSecretFiles(t *testing.T) {
	kek := testKEK(7)
	kekFile := writeSecretFile(t, kek+"\n", 0o600)
	tokenFile := writeSecretFile(t, "s3cr3t-admin\n", 0o644)
	h, _ := sealedHarness(t, kek)
	h.environ = append(withEnv(h.environ, "PROGRESSDB_KEK", ""), "PROGRESSDB_KEK_FILE="+kekFile,
		"PROGRESSDB_ADMIN_TOKEN_FILE="+tokenFile)
	code, out, errOut := h.run("config", "check")
	if code != exitOK {
		t.Fatalf("config check: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"PROGRESSDB_KEK=<redacted>\n", "PROGRESSDB_KEK_FILE=" + kekFile + "\n",
		"PROGRESSDB_ADMIN_TOKEN=<redacted>\n", "PROGRESSDB_ADMIN_TOKEN_FILE=" + tokenFile + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{"warning: PROGRESSDB_ADMIN_TOKEN_FILE=\"" + tokenFile + "\": readable by its group or others",
		"chmod 600 " + tokenFile, "warning: PROGRESSDB_AUDIT_SIGNING_KEY=\"\": is unset while PROGRESSDB_KEK seals content"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(out+errOut, "s3cr3t") || strings.Contains(out+errOut, strings.TrimPrefix(kek, "base64key://")) {
		t.Errorf("the output shows a secret:\n%s%s", out, errOut)
	}

	both := append(append([]string(nil), h.environ...), "PROGRESSDB_KEK="+kek)
	hh := *h
	hh.environ = both
	code, _, errOut = hh.run("config", "check")
	if code != exitUsage || !strings.Contains(errOut, "PROGRESSDB_KEK_FILE=") || !strings.Contains(errOut, "so is PROGRESSDB_KEK") ||
		strings.Contains(errOut, strings.TrimPrefix(kek, "base64key://")) {
		t.Errorf("both KEK forms: exit %d, stderr %q, want 2 naming both", code, errOut)
	}
}

// serve warns at start of sealing without an audit signing key: every
// erasure receipt would be unverifiable.
func TestServeWarnsOfSealingWithoutSigningKey(t *testing.T) {
	h, _ := sealedHarness(t, testKEK(8))
	logs := startServerLogs(t, h.environ)
	if !strings.Contains(logs(), `"msg":"sealing_without_signing_key","var":"PROGRESSDB_AUDIT_SIGNING_KEY"`) {
		t.Fatalf("logs:\n%s", logs())
	}
}

// runStdin is run with stdin as the command's standard input.
func (h *harness) runStdin(stdin io.Reader, args ...string) (code int, stdout, stderr string) {
	h.t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, h.environ, stdin, &out, &errb)
	return code, out.String(), errb.String()
}

// A KMS KEK this host cannot use (here: AWS KMS without credentials) is
// refused by config check as by serve, exit 2 naming PROGRESSDB_KEK, and
// serve's refused start leaves no folder behind: before, config check
// passed it, and serve exited 1 naming the key store and left the
// database and key store folders.
func TestUnusableKMSKEKRefused(t *testing.T) {
	dir := t.TempDir()
	environ := []string{
		"PROGRESSDB_DB_PATH=" + filepath.Join(dir, "data"),
		"PROGRESSDB_KEYSTORE_PATH=" + filepath.Join(dir, "keys"),
		"PROGRESSDB_RETENTION_ENABLED=true",
		"PROGRESSDB_ADDR=127.0.0.1:0",
		"PROGRESSDB_KEK=awskms://alias/progressdb?region=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true",
		"HOME=" + dir,
	}
	for _, cmd := range [][]string{{"config", "check"}, {"serve"}} {
		code, out, errOut := runBinary(t, environ, cmd...)
		if code != exitUsage || !strings.Contains(errOut, "invalid configuration: PROGRESSDB_KEK=") {
			t.Errorf("%s: exit %d, want 2 naming PROGRESSDB_KEK\nstdout: %s\nstderr: %s", cmd[0], code, out, errOut)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s left %d entries behind", cmd[0], len(entries))
		}
	}
}

// An address another process holds is the most common failed start: the
// server takes its address before it creates any folder, so the failure
// leaves nothing on disk to mistake for a database.
func TestServeOnAnAddressInUseLeavesNoFolder(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	dir := t.TempDir()
	environ := []string{
		"PROGRESSDB_DB_PATH=" + filepath.Join(dir, "data"),
		"PROGRESSDB_BACKUP_PATH=" + filepath.Join(dir, "backups"),
		"PROGRESSDB_ADDR=" + held.Addr().String(),
		"HOME=" + dir,
	}
	code, out, errOut := runBinary(t, environ, "serve")
	if code == 0 || !strings.Contains(errOut, "listen on "+held.Addr().String()) {
		t.Errorf("exit %d, want a failure naming the address\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("serve left %d entries behind: %v", len(entries), entries)
	}
}
