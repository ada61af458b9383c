package client_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/client"
)

// pki is a CA and the server and client certificates it signed, as PEM
// files in a folder.
type pki struct {
	dir                           string
	caFile, serverCert, serverKey string
	clientCert, clientKey         string
	pool                          *x509.CertPool
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p.pool = x509.NewCertPool()
	p.pool.AddCert(ca)
	p.caFile = p.write(t, "ca.pem", "CERTIFICATE", caDER)
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "EC PRIVATE KEY", keyDER)
	}
	p.serverCert, p.serverKey = issue("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = issue("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func (p *pki) write(t *testing.T, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The TLS options verify the server with the given CA and present the
// client certificate, here to an HTTPS node in front of a real server
// that requires one: a CA file and key pair, or a tls.Config.
func TestTLSOptions(t *testing.T) {
	base := serve(t)
	p := newPKI(t)
	target, _ := url.Parse(base)
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewUnstartedServer(proxy)
	cert, err := tls.LoadX509KeyPair(p.serverCert, p.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ctx := context.Background()

	c := newClient(t, srv.URL, client.WithTLSFiles(client.TLSFiles{CAFile: p.caFile, CertFile: p.clientCert, KeyFile: p.clientKey}))
	th := check(c.CreateThread(ctx, client.NewThread{Title: "Over TLS", Author: "ann"})).must(t)
	if got := check(c.GetThread(ctx, th.Id, false)).must(t); got.Title != "Over TLS" {
		t.Fatalf("got %+v", got)
	}

	cfg, err := client.LoadTLSConfig(client.TLSFiles{CAFile: p.caFile, CertFile: p.clientCert, KeyFile: p.clientKey})
	if err != nil {
		t.Fatal(err)
	}
	c = newClient(t, srv.URL, client.WithTLSConfig(cfg))
	check(c.GetThread(ctx, th.Id, false)).must(t)

	// Without the client certificate the node refuses the handshake; with
	// the system's roots the server is not trusted.
	c = newClient(t, srv.URL, client.WithTLSFiles(client.TLSFiles{CAFile: p.caFile}))
	if _, err := c.GetThread(ctx, th.Id, false); err == nil {
		t.Fatal("no client certificate, and the request went through")
	}
	c = newClient(t, srv.URL)
	_, err = c.GetThread(ctx, th.Id, false)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("unknown CA: %v", err)
	}

	// Bad files are named.
	for _, f := range []client.TLSFiles{
		{CAFile: filepath.Join(p.dir, "missing.pem")},
		{CAFile: p.clientKey},
		{CertFile: p.clientCert},
		{CertFile: p.clientCert, KeyFile: p.serverKey},
	} {
		if _, err := client.New(srv.URL, client.WithTLSFiles(f)); err == nil {
			t.Errorf("New with %+v: no error", f)
		}
	}
	// A TLS option needs a transport it can set.
	if _, err := client.New(srv.URL, client.WithTLSConfig(cfg), client.WithHTTP(&http.Client{Transport: &countingTransport{}})); err == nil {
		t.Error("TLS options over a foreign transport: no error")
	}
}
