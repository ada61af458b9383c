package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/internal/certs"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// transport is a server's TLS (spec §14): the certificate its listener
// presents, the CAs that client and node certificates are checked
// against, and what it presents and trusts when it calls another node.
// Without any TLS setting every field is nil and the server speaks plain
// HTTP, as before.
type transport struct {
	serve     *certs.Pair // presented by the listener: the server's, else the cluster's
	pairs     map[string]*certs.Pair
	clientCA  *x509.CertPool // admin routes' client certificates
	clusterCA *x509.CertPool // node certificates
	cluster   *certs.Pair    // presented to other nodes
	nodeRoots *x509.CertPool // what a node trusts when it calls another
}

// loadTransport reads the TLS files of cfg and checks that they work
// together; the errors are *StartupError naming the setting.
func loadTransport(cfg config.Config) (*transport, error) {
	t := &transport{pairs: map[string]*certs.Pair{}}
	var err error
	if c := cfg.TLS; c.CertFile != "" {
		if t.serve, err = certs.LoadPair(config.VarTLSCert, c.CertFile, config.VarTLSKey, c.KeyFile); err != nil {
			return nil, startupError(err)
		}
		t.pairs["server"] = t.serve
	}
	if cfg.ClusterTLS() {
		cl := cfg.Cluster
		if t.clusterCA, err = certs.LoadPool(config.VarClusterTLSCA, cl.TLSCA); err != nil {
			return nil, startupError(err)
		}
		if t.cluster, err = certs.LoadPair(config.VarClusterTLSCert, cl.TLSCert, config.VarClusterTLSKey, cl.TLSKey); err != nil {
			return nil, startupError(err)
		}
		t.pairs["cluster"] = t.cluster
		if err := t.checkNodeCerts(cfg); err != nil {
			return nil, err
		}
		if t.serve == nil {
			t.serve = t.cluster
		}
	}
	if c := cfg.TLS; c.ClientCAFile != "" {
		if t.clientCA, err = certs.LoadPool(config.VarTLSClientCA, c.ClientCAFile); err != nil {
			return nil, startupError(err)
		}
	}
	return t, nil
}

// checkNodeCerts refuses at start what the other nodes would refuse on
// every call: a cluster certificate that the cluster CA did not sign, or
// that does not name this node's advertise host, and a server
// certificate the nodes cannot check.
func (t *transport) checkNodeCerts(cfg config.Config) error {
	u, err := url.Parse(cfg.AdvertiseURL)
	if err != nil {
		return &StartupError{Var: config.VarAdvertiseURL, Value: cfg.AdvertiseURL, Rule: "must be a URL", Err: err}
	}
	host := u.Hostname()
	leaf := t.cluster.Leaf()
	usages := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if t.serve == nil {
		usages = append(usages, x509.ExtKeyUsageServerAuth) // the listener presents it too
	}
	for _, usage := range usages {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: t.clusterCA, DNSName: host,
			KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return &StartupError{Var: config.VarClusterTLSCert, Value: cfg.Cluster.TLSCert,
				Rule: "must be signed by " + config.VarClusterTLSCA + ", be valid now for TLS clients and servers, and name the host of " +
					config.VarAdvertiseURL + " (" + host + ")", Err: err}
		}
	}
	// The nodes check the listener's certificate against the cluster CA,
	// and a server certificate of another CA against PROGRESSDB_TLS_CA_FILE
	// (else the system's CAs).
	t.nodeRoots = t.clusterCA
	if t.serve == nil {
		return nil
	}
	roots, err := x509.SystemCertPool()
	if err != nil || cfg.TLS.CAFile != "" {
		roots = x509.NewCertPool()
	}
	if cfg.TLS.CAFile != "" {
		data, err := os.ReadFile(cfg.TLS.CAFile)
		if err != nil || !roots.AppendCertsFromPEM(data) {
			return &StartupError{Var: config.VarTLSCA, Value: cfg.TLS.CAFile, Rule: "must hold PEM certificates",
				Err: errors.Join(err, errors.New("no certificate found"))}
		}
	}
	data, _ := os.ReadFile(cfg.Cluster.TLSCA) // read by LoadPool just now
	roots.AppendCertsFromPEM(data)
	t.nodeRoots = roots
	if _, err := t.serve.Leaf().Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
		return &StartupError{Var: config.VarTLSCert, Value: cfg.TLS.CertFile,
			Rule: "must be signed by " + config.VarClusterTLSCA + " or " + config.VarTLSCA + " (else a CA of the system) and name the host of " +
				config.VarAdvertiseURL + " (" + host + "): the other nodes check it", Err: err}
	}
	return nil
}

// startupError turns a certs.FileError into a StartupError (exit 2).
func startupError(err error) error {
	var fe *certs.FileError
	if errors.As(err, &fe) {
		return &StartupError{Var: fe.Var, Value: fe.Path, Rule: fe.Rule, Err: fe.Err}
	}
	return err
}

// tls reports whether the listener serves TLS.
func (t *transport) tls() bool { return t.serve != nil }

// listener wraps ln to serve TLS 1.2 and 1.3 (HTTP/2 and HTTP/1.1), asking
// for client certificates when a route needs one: the Guard checks them
// against the CA of the route. A plain-HTTP request on it is answered
// with a TLS error only.
func (t *transport) listener(ln net.Listener) net.Listener {
	if !t.tls() {
		return ln
	}
	c := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: t.serve.GetCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
	}
	if t.clientCA != nil || t.clusterCA != nil {
		c.ClientAuth = tls.RequestClientCert
	}
	return tls.NewListener(ln, c)
}

// nodeTLS is the TLS of a node's calls to the other nodes: its cluster
// certificate, checked by them, and theirs checked against nodeRoots;
// nil without mutual TLS.
func (t *transport) nodeTLS() *tls.Config {
	if t.cluster == nil {
		return nil
	}
	return &tls.Config{
		MinVersion:           tls.VersionTLS12,
		RootCAs:              t.nodeRoots,
		GetClientCertificate: t.cluster.GetClientCertificate,
	}
}

// guard is the Guard of the routes that need a client certificate.
func (t *transport) guard(logger *slog.Logger) *certs.Guard {
	return &certs.Guard{Admin: t.clientCA, Nodes: t.clusterCA, Logger: logger, IDs: store.NewIDSource()}
}

// start reloads the pairs on SIGHUP and when their files change, and
// reports their expiry to reg, until ctx ends.
func (t *transport) start(ctx context.Context, reg prometheus.Registerer, logger *slog.Logger) {
	if len(t.pairs) == 0 {
		return
	}
	reg.MustRegister(certs.NewExpiryCollector(t.pairs))
	for name, p := range t.pairs {
		if left := time.Until(p.Leaf().NotAfter); left < 14*24*time.Hour {
			logger.Warn("tls_certificate_expires_soon", "cert", name, "not_after", p.Leaf().NotAfter, "left", left.Round(time.Minute))
		}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	r := &certs.Reloader{Pairs: t.pairs, Logger: logger}
	go func() {
		defer signal.Stop(hup)
		r.Run(ctx, hup)
	}()
}

// wrap puts the guard in front of h when a route needs a certificate.
func (t *transport) wrap(h http.Handler, g *certs.Guard) http.Handler {
	if g.Admin == nil && g.Nodes == nil {
		return h
	}
	return g.Handler(h)
}

// scheme is the URL scheme of the listener.
func (t *transport) scheme() string {
	if t.tls() {
		return "https"
	}
	return "http"
}
