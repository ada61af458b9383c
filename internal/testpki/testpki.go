// Package testpki makes the certificates of TLS tests: a CA, and a server
// and a client certificate it signed (the server's for 127.0.0.1 and
// localhost), as PEM files in a folder, valid for an hour.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
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
	p := &PKI{Dir: dir, Pool: x509.NewCertPool()}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p.Pool.AddCert(ca)
	if p.CAFile, err = write(dir, "ca.pem", "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) (cert, key string, err error) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return "", "", err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			return "", "", err
		}
		keyDER, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return "", "", err
		}
		if cert, err = write(dir, name+".pem", "CERTIFICATE", der); err != nil {
			return "", "", err
		}
		key, err = write(dir, name+"-key.pem", "EC PRIVATE KEY", keyDER)
		return cert, key, err
	}
	if p.ServerCert, p.ServerKey, err = issue("server", 2, x509.ExtKeyUsageServerAuth); err != nil {
		return nil, err
	}
	if p.ClientCert, p.ClientKey, err = issue("client", 3, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	return p, nil
}

func write(dir, name, kind string, der []byte) (string, error) {
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		return "", fmt.Errorf("testpki: %w", err)
	}
	return path, nil
}
