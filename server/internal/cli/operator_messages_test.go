package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/internal/testcerts"
)

// The built binary's messages when a server refuses it say what to set on
// this side: a wrong or unset admin token names PROGRESSDB_ADMIN_TOKEN
// (not "a process that is not the server asked"), a plain-HTTP call to
// the HTTPS port says to use https://, and a missing client certificate
// names PROGRESSDB_TLS_CLIENT_CERT_FILE.
func TestOperatorMessagesNameWhatToSet(t *testing.T) {
	h := newHarness(t)
	h.mustRun("seed", "--threads", "1")
	base := serverEnv(h)
	addr := startBinaryServer(t, base)
	for _, c := range []struct{ name, token string }{{"wrong", "PROGRESSDB_ADMIN_TOKEN=nope"}, {"unset", "PROGRESSDB_ADMIN_TOKEN="}} {
		env := append(append([]string(nil), base...), "PROGRESSDB_ADDR="+addr, c.token)
		code, out, errOut := runBinary(t, env, "backup", "create", "--out", filepath.Join(t.TempDir(), "b.tar"))
		if code == exitOK || !strings.Contains(errOut, "PROGRESSDB_ADMIN_TOKEN") || strings.Contains(errOut, "not the server asked") {
			t.Errorf("admin token %s: exit %d, stderr %q; want a failure naming PROGRESSDB_ADMIN_TOKEN\n%s", c.name, code, errOut, out)
		}
	}

	dir := t.TempDir()
	ca, clientCA := testcerts.NewCA(t, "server CA"), testcerts.NewCA(t, "client CA")
	tlsAddr, _ := startTLSServer(t, ca, dir, []string{"PATH=" + os.Getenv("PATH"), "PROGRESSDB_DB_PATH=" + filepath.Join(dir, "data"),
		"PROGRESSDB_LOG_LEVEL=warn", "PROGRESSDB_ADMIN_TOKEN=adm", "PROGRESSDB_TLS_CLIENT_CA_FILE=" + clientCA.WriteCA(t, dir, "client-ca.pem")})
	cli := []string{"PATH=" + os.Getenv("PATH"), "PROGRESSDB_DB_PATH=" + filepath.Join(t.TempDir(), "none"), "PROGRESSDB_ADMIN_TOKEN=adm",
		"PROGRESSDB_TLS_CA_FILE=" + ca.WriteCA(t, dir, "ca.pem")}
	code, _, errOut := runBinary(t, cli, "retention", "status", "--server", "http://"+tlsAddr)
	if code == exitOK || !strings.Contains(errOut, "https://") {
		t.Errorf("plain HTTP to the HTTPS port: exit %d, stderr %q; want a failure saying to use https://", code, errOut)
	}
	code, _, errOut = runBinary(t, cli, "retention", "status", "--server", "https://"+tlsAddr)
	if code == exitOK || !strings.Contains(errOut, "PROGRESSDB_TLS_CLIENT_CERT_FILE") {
		t.Errorf("no client certificate: exit %d, stderr %q; want a failure naming PROGRESSDB_TLS_CLIENT_CERT_FILE", code, errOut)
	}
}
