package cli

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/progressdb/progressdb/internal/testcerts"
)

// startTLSServer starts `progressdb serve` from the built binary with
// environ and a certificate of ca (written to dir as server.crt and
// server.key) on a free loopback port, waits until it answers over TLS,
// and stops it when the test ends. It returns the address and the serving
// process.
func startTLSServer(t *testing.T, ca *testcerts.CA, dir string, environ []string) (string, *exec.Cmd) {
	t.Helper()
	cert, key := ca.Issue(t, "first", testcerts.Options{Server: true}).Write(t, dir, "server")
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: testcerts.ClientConfig(ca.Pool())}}
	return startServe(t, append(append([]string(nil), environ...), "PROGRESSDB_TLS_CERT_FILE="+cert, "PROGRESSDB_TLS_KEY_FILE="+key), c, "https")
}

// The command line reaches a TLS server with --server https://…: it
// verifies the server with PROGRESSDB_TLS_CA_FILE and presents
// PROGRESSDB_TLS_CLIENT_CERT_FILE where the admin routes need a client
// certificate. A server it cannot verify (no CA file, another CA's) fails
// naming the setting that verified it; a missing client certificate is the
// server's refusal; an unreadable CA file is exit 2 naming it.
func TestServerOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca, clientCA, other := testcerts.NewCA(t, "server CA"), testcerts.NewCA(t, "client CA"), testcerts.NewCA(t, "other CA")
	base := []string{"PATH=" + os.Getenv("PATH"), "PROGRESSDB_DB_PATH=" + filepath.Join(dir, "data"),
		"PROGRESSDB_LOG_LEVEL=warn", "PROGRESSDB_ADMIN_TOKEN=adm"}
	addr, _ := startTLSServer(t, ca, dir, append(base, "PROGRESSDB_TLS_CLIENT_CA_FILE="+clientCA.WriteCA(t, dir, "client-ca.pem")))
	server := "https://" + addr
	// The commands run elsewhere: the folder is the server's.
	cli := []string{"PATH=" + os.Getenv("PATH"), "PROGRESSDB_DB_PATH=" + filepath.Join(t.TempDir(), "none"), "PROGRESSDB_ADMIN_TOKEN=adm"}
	clientCert, clientKey := clientCA.Issue(t, "operator", testcerts.Options{Client: true}).Write(t, dir, "operator")
	withCert := append(cli, "PROGRESSDB_TLS_CLIENT_CERT_FILE="+clientCert, "PROGRESSDB_TLS_CLIENT_KEY_FILE="+clientKey)
	caFile, otherFile := ca.WriteCA(t, dir, "ca.pem"), other.WriteCA(t, dir, "other.pem")

	code, out, errOut := runBinary(t, append(withCert, "PROGRESSDB_TLS_CA_FILE="+caFile), "retention", "status", "--server", server)
	if code != exitOK || !strings.Contains(out, "through the server at "+server) {
		t.Fatalf("retention status --server %s: exit %d\n%s%s", server, code, out, errOut)
	}
	for name, env := range map[string][]string{
		"PROGRESSDB_TLS_CA_FILE":                       append(withCert, "PROGRESSDB_TLS_CA_FILE="+otherFile),
		"the system's CAs (set PROGRESSDB_TLS_CA_FILE": withCert,
	} {
		code, out, errOut := runBinary(t, env, "retention", "status", "--server", server)
		if code == exitOK || !strings.Contains(errOut, "its certificate was not verified with "+name) {
			t.Errorf("a server not verified by %s: exit %d\n%s%s", name, code, out, errOut)
		}
	}
	code, out, errOut = runBinary(t, append(cli, "PROGRESSDB_TLS_CA_FILE="+caFile), "retention", "status", "--server", server)
	if code == exitOK || !strings.Contains(errOut, "client certificate") {
		t.Errorf("without a client certificate: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = runBinary(t, append(withCert, "PROGRESSDB_TLS_CA_FILE="+filepath.Join(dir, "missing.pem")), "retention", "status", "--server", server)
	if code != exitUsage || !strings.Contains(errOut, "PROGRESSDB_TLS_CA_FILE") {
		t.Errorf("an unreadable CA file: exit %d, want 2 naming it\n%s", code, errOut)
	}
}

// `serve` refuses a key that is not its certificate's with exit 2 and one
// line naming PROGRESSDB_TLS_KEY_FILE.
func TestServeRefusesAMismatchedKey(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "CA")
	cert, _ := ca.Issue(t, "a", testcerts.Options{}).Write(t, dir, "a")
	_, key := ca.Issue(t, "b", testcerts.Options{}).Write(t, dir, "b")
	for _, cmd := range [][]string{{"serve"}, {"config", "check"}} {
		code, _, errOut := runBinary(t, []string{"PATH=" + os.Getenv("PATH"), "PROGRESSDB_DB_PATH=" + filepath.Join(dir, "data"),
			"PROGRESSDB_ADDR=127.0.0.1:0", "PROGRESSDB_TLS_CERT_FILE=" + cert, "PROGRESSDB_TLS_KEY_FILE=" + key}, cmd...)
		msg := strings.TrimSuffix(errOut, "\n")
		if code != exitUsage || strings.Contains(msg, "\n") || !strings.Contains(msg, "PROGRESSDB_TLS_KEY_FILE") {
			t.Errorf("%s with a mismatched key: exit %d, want 2 with one line naming PROGRESSDB_TLS_KEY_FILE\n%s", cmd, code, errOut)
		}
	}
}

// SIGHUP to `serve` puts renewed certificate files in force for new
// connections, while a connection opened before keeps working over the
// certificate it was opened with.
func TestServeReloadsItsCertificateOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "CA")
	addr, cmd := startTLSServer(t, ca, dir, []string{"PATH=" + os.Getenv("PATH"),
		"PROGRESSDB_DB_PATH=" + filepath.Join(dir, "data"), "PROGRESSDB_LOG_LEVEL=warn"})
	served := func(c *http.Client) string {
		t.Helper()
		res, err := c.Get("https://" + addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.TLS.PeerCertificates[0].Subject.CommonName
	}
	newClient := func() *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: testcerts.ClientConfig(ca.Pool()), ForceAttemptHTTP2: true}}
	}
	open := newClient()
	if cn := served(open); cn != "first" {
		t.Fatalf("served %q", cn)
	}
	ca.Issue(t, "second", testcerts.Options{Server: true}).Write(t, dir, "server")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); served(newClient()) != "second"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a new connection never got the renewed certificate")
		}
	}
	if cn := served(open); cn != "first" {
		t.Fatalf("the connection opened before shows %q, want first", cn)
	}
}
