// Package testpki makes the certificates of the clients' TLS tests: a CA,
// and a server and a client certificate it signed (the server's for
// 127.0.0.1 and localhost), as PEM files in a folder, valid for an hour.
// They are made by testcerts, the certificate maker of every TLS test.
package testpki

import (
	"crypto/x509"
	"fmt"
	"path/filepath"
	"time"

	"github.com/progressdb/progressdb/internal/testcerts"
)

// PKI names the files New wrote.
type PKI struct {
	Dir                   string
	CAFile                string // ca.pem
	ServerCert, ServerKey string // server.pem, server-key.pem
	ClientCert, ClientKey string // client.pem, client-key.pem
	// Pool holds the CA.
	Pool *x509.CertPool
}

// New writes a CA and the certificates it signed into dir.
func New(dir string) (*PKI, error) {
	p := &PKI{Dir: dir}
	err := testcerts.Catch(func(t testcerts.TB) {
		ca := testcerts.NewCA(t, "test CA")
		p.Pool = ca.Pool()
		p.CAFile = ca.WriteCA(t, dir, "ca.pem")
		hour := time.Now().Add(time.Hour)
		p.ServerCert, p.ServerKey = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
		ca.Issue(t, "server", testcerts.Options{Server: true, NotAfter: hour}).WriteFiles(t, p.ServerCert, p.ServerKey)
		p.ClientCert, p.ClientKey = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
		ca.Issue(t, "client", testcerts.Options{Client: true, NotAfter: hour}).WriteFiles(t, p.ClientCert, p.ClientKey)
	})
	if err != nil {
		return nil, fmt.Errorf("testpki: %w", err)
	}
	return p, nil
}
