package faults

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/internal/testcerts"
)

// suiteCA is the cluster CA of the suite's nodes, made by the first
// cluster test; its certificate is in the roots of httpClient.
var suiteCA struct {
	once sync.Once
	ca   *testcerts.CA
	file string
}

// httpClient never follows redirects: the suite checks statuses as sent.
// It trusts the suite's cluster CA, whose certificates the nodes serve.
var httpClient = &http.Client{
	Timeout:       time.Minute,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Transport:     suiteTransport,
}

var suiteTransport = func() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: suiteRoots}
	return tr
}()

// suiteRoots holds the suite's cluster CA once a cluster test made it.
var suiteRoots = x509.NewCertPool()

// caDir holds the CA file for the whole run (TestMain's folder): a test's
// own folder goes with it.
var caDir string

// nodeTLS is the mutual TLS settings of node id, its certificate and key
// written to dir.
func nodeTLS(t testing.TB, id, dir string) []string {
	t.Helper()
	suiteCA.once.Do(func() {
		suiteCA.ca = testcerts.NewCA(t, "faults cluster CA")
		suiteCA.file = suiteCA.ca.WriteCA(t, caDir, "cluster-ca.pem")
		suiteRoots.AddCert(suiteCA.ca.Cert)
	})
	cert, key := suiteCA.ca.Issue(t, id, testcerts.Options{}).Write(t, dir, "node-tls")
	return []string{"PROGRESSDB_CLUSTER_TLS_CA_FILE", suiteCA.file, "PROGRESSDB_CLUSTER_TLS_CERT_FILE", cert,
		"PROGRESSDB_CLUSTER_TLS_KEY_FILE", key}
}

// addr is the host:port of s.
func (s *server) addr() string {
	return strings.TrimPrefix(strings.TrimPrefix(s.url, "http://"), "https://")
}
