package certs_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/progressdb/progressdb/internal/testcerts"
	"github.com/progressdb/progressdb/server/internal/certs"
)

// tlsServer serves over TLS with pair's certificate and counts the
// connections it accepts.
func tlsServer(t *testing.T, pair *certs.Pair) (url string, conns *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns = new(atomic.Int64)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
	}
	tl := tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: pair.GetCertificate,
		NextProtos: []string{"h2", "http/1.1"}})
	go func() { _ = srv.Serve(tl) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String(), conns
}

// servedCN asks url through c and returns the common name of the
// certificate the answer came over.
func servedCN(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.TLS == nil || resp.ProtoMajor != 2 {
		t.Fatalf("answer over %s, TLS %v: want HTTP/2 over TLS", resp.Proto, resp.TLS != nil)
	}
	return resp.TLS.PeerCertificates[0].Subject.CommonName
}

func newClient(ca *testcerts.CA) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: testcerts.ClientConfig(ca.Pool()), ForceAttemptHTTP2: true}}
}

// runReloader runs a Reloader over pair and returns the channel of its
// reloads' results and the channel that sends it SIGHUP.
func runReloader(t *testing.T, pair *certs.Pair, interval time.Duration) (<-chan error, chan<- os.Signal) {
	t.Helper()
	done := make(chan error, 16)
	hup := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	r := &certs.Reloader{Pairs: map[string]*certs.Pair{"server": pair}, Interval: interval,
		Reloaded: func(_ string, err error) {
			select {
			case done <- err:
			case <-ctx.Done():
			}
		}}
	go func() { defer close(stopped); r.Run(ctx, hup) }()
	t.Cleanup(func() { cancel(); <-stopped })
	return done, hup
}

// A certificate replaced on disk (by a rename, as a Kubernetes Secret's
// volume does) is in force for the connections that follow, while a
// connection opened before keeps working over the certificate it was
// opened with; a reload that reads a key not matching the certificate
// keeps the pair in force.
func TestReloadOnFileChangeKeepsOpenConnections(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "test CA")
	certFile, keyFile := ca.Issue(t, "first", testcerts.Options{Server: true}).Write(t, dir, "server")
	pair, err := certs.LoadPair("CERT", certFile, "KEY", keyFile)
	if err != nil {
		t.Fatal(err)
	}
	url, conns := tlsServer(t, pair)
	open := newClient(ca)
	if cn := servedCN(t, open, url); cn != "first" {
		t.Fatalf("served %q, want first", cn)
	}

	reloads, _ := runReloader(t, pair, 10*time.Millisecond)
	ca.Issue(t, "second", testcerts.Options{Server: true}).Write(t, dir, "server")
	// The watch may look between the two renames and find a key that does
	// not match yet: it keeps the pair in force and looks again.
	for err := range reloads {
		if err == nil {
			break
		}
	}
	if cn := pair.Leaf().Subject.CommonName; cn != "second" {
		t.Fatalf("in force after the change: %q", cn)
	}
	// The open connection goes on, over the certificate it was opened with.
	if cn := servedCN(t, open, url); cn != "first" {
		t.Fatalf("the open connection now shows %q, want first", cn)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections, want the one open connection", n)
	}
	if cn := servedCN(t, newClient(ca), url); cn != "second" {
		t.Fatalf("a new connection got %q, want second", cn)
	}

	// A key that does not match: the pair in force stays.
	third := ca.Issue(t, "third", testcerts.Options{Server: true})
	if err := os.WriteFile(keyFile, third.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	// A look at the files made while the second pair was being written
	// may still reload it once more (nil) before the third key is seen.
	err = nil
	for err == nil {
		err = <-reloads
	}
	var fe *certs.FileError
	if !errors.As(err, &fe) || fe.Var != "KEY" {
		t.Fatalf("reload of a mismatched key: %v, want a FileError naming KEY", err)
	}
	if cn := servedCN(t, newClient(ca), url); cn != "second" {
		t.Fatalf("after a failed reload a new connection got %q, want second", cn)
	}
}

// SIGHUP reloads at once, whatever the interval of the watch.
func TestReloadOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "test CA")
	certFile, keyFile := ca.Issue(t, "first", testcerts.Options{Server: true}).Write(t, dir, "server")
	pair, err := certs.LoadPair("CERT", certFile, "KEY", keyFile)
	if err != nil {
		t.Fatal(err)
	}
	url, _ := tlsServer(t, pair)
	reloads, hup := runReloader(t, pair, time.Hour)
	ca.Issue(t, "second", testcerts.Options{Server: true}).Write(t, dir, "server")
	hup <- syscall.SIGHUP
	if err := <-reloads; err != nil {
		t.Fatalf("reload: %v", err)
	}
	if cn := servedCN(t, newClient(ca), url); cn != "second" {
		t.Fatalf("a new connection got %q, want second", cn)
	}
}

// LoadPair names the setting of the file at fault.
func TestLoadPairNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "test CA")
	a := ca.Issue(t, "a", testcerts.Options{})
	b := ca.Issue(t, "b", testcerts.Options{})
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	aCert, aKey, bKey := write("a.crt", a.CertPEM), write("a.key", a.KeyPEM), write("b.key", b.KeyPEM)
	notPEM := write("junk", []byte("not a certificate"))
	for _, c := range []struct {
		cert, key, want string
	}{
		{aCert, bKey, "KEY"},
		{notPEM, aKey, "CERT"},
		{aCert, notPEM, "KEY"},
		{aCert, aCert, "KEY"},
		{filepath.Join(dir, "missing"), aKey, "CERT"},
	} {
		_, err := certs.LoadPair("CERT", c.cert, "KEY", c.key)
		var fe *certs.FileError
		if !errors.As(err, &fe) || fe.Var != c.want {
			t.Errorf("LoadPair(%s, %s) = %v, want a FileError naming %s", filepath.Base(c.cert), filepath.Base(c.key), err, c.want)
		}
	}
	if _, err := certs.LoadPair("CERT", aCert, "KEY", aKey); err != nil {
		t.Fatal(err)
	}
}
