// Package testcerts makes real certificates for tests (crypto/x509): a CA,
// and server, client or node certificates it signs, with the hosts,
// validity and uses a test asks for, written as PEM files where the
// server reads them.
package testcerts

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TB is what the helpers need of a test (testing.TB has it); Catch
// gives code outside a test one.
type TB interface {
	Helper()
	Fatal(args ...any)
}

// Catch runs fn with a TB whose Fatal stops fn, and returns what it
// reported as an error: for callers that are not tests (a benchmark, a
// helper that returns errors).
func Catch(fn func(t TB)) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c, ok := r.(caught)
			if !ok {
				panic(r)
			}
			err = errors.New(c.msg)
		}
	}()
	fn(catcher{})
	return nil
}

// caught is what a catcher's Fatal panics with.
type caught struct{ msg string }

type catcher struct{}

func (catcher) Helper()           {}
func (catcher) Fatal(args ...any) { panic(caught{fmt.Sprint(args...)}) }

// CA is a certificate authority of a test.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	PEM  []byte
}

// NewCA makes a self-signed CA named name, valid from an hour ago for a
// year.
func NewCA(t TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool is a pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// WriteCA writes the CA's certificate to dir/name and returns its path.
func (ca *CA) WriteCA(t TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Options shape a certificate. Without Server or Client it is for both,
// as a node's is.
type Options struct {
	Hosts     []string // DNS names or IP addresses; "127.0.0.1" and "localhost" when empty
	NotBefore time.Time
	NotAfter  time.Time // an hour ago to a day from now when zero
	Server    bool
	Client    bool
}

// Leaf is a certificate and its key.
type Leaf struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// Issue makes a certificate for cn signed by the CA.
func (ca *CA) Issue(t TB, cn string, o Options) Leaf {
	t.Helper()
	if len(o.Hosts) == 0 {
		o.Hosts = []string{"127.0.0.1", "localhost"}
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	var usage []x509.ExtKeyUsage
	if o.Server || !o.Client {
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	if o.Client || !o.Server {
		usage = append(usage, x509.ExtKeyUsageClientAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
	}
	for _, h := range o.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Leaf{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})}
}

// Write writes the certificate and key to dir/<name>.crt and
// dir/<name>.key (WriteFiles) and returns their paths.
func (l Leaf) Write(t TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	l.WriteFiles(t, certFile, keyFile)
	return certFile, keyFile
}

// WriteFiles writes the certificate and key to their paths, each
// replaced by a rename as a deployment replaces them.
func (l Leaf) WriteFiles(t TB, certFile, keyFile string) {
	t.Helper()
	for _, f := range []struct {
		path string
		data []byte
	}{{certFile, l.CertPEM}, {keyFile, l.KeyPEM}} {
		tmp := f.path + ".tmp"
		if err := os.WriteFile(tmp, f.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f.path); err != nil {
			t.Fatal(err)
		}
	}
}

// TLS is the pair as a tls.Certificate, for a client to present.
func (l Leaf) TLS(t TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ClientConfig is the TLS of a client that trusts roots and presents
// certs (none: no client certificate).
func ClientConfig(roots *x509.CertPool, certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12}
}

func newKey(t TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
