package client_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/client"
	"github.com/progressdb/progressdb/internal/testpki"
)

func newPKI(t *testing.T) *testpki.PKI {
	t.Helper()
	p, err := testpki.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return p
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
	cert, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: p.Pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ctx := context.Background()

	c := newClient(t, srv.URL, client.WithTLSFiles(client.TLSFiles{CAFile: p.CAFile, CertFile: p.ClientCert, KeyFile: p.ClientKey}))
	th := check(c.CreateThread(ctx, client.NewThread{Title: "Over TLS", Author: "ann"})).must(t)
	if got := check(c.GetThread(ctx, th.Id, false)).must(t); got.Title != "Over TLS" {
		t.Fatalf("got %+v", got)
	}

	cfg, err := client.LoadTLSConfig(client.TLSFiles{CAFile: p.CAFile, CertFile: p.ClientCert, KeyFile: p.ClientKey})
	if err != nil {
		t.Fatal(err)
	}
	c = newClient(t, srv.URL, client.WithTLSConfig(cfg))
	check(c.GetThread(ctx, th.Id, false)).must(t)

	// Without the client certificate the node refuses the handshake; with
	// the system's roots the server is not trusted.
	c = newClient(t, srv.URL, client.WithTLSFiles(client.TLSFiles{CAFile: p.CAFile}))
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
		{CAFile: filepath.Join(p.Dir, "missing.pem")},
		{CAFile: p.ClientKey},
		{CertFile: p.ClientCert},
		{CertFile: p.ClientCert, KeyFile: p.ServerKey},
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
